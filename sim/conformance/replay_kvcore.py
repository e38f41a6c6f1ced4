"""kvcore's side of a step case: the oracle driver's config dict -> ``kvsim replay`` lines."""

from __future__ import annotations

from typing import Any

from kvcore.replay import ReplayConfig, replay
from kvcore.replay_trace import parse_trace

MAX_STEPS = 50_000  # a livelocked replay is reported, not waited for

# driver config key -> kvsim replay flag (booleans become --x / --no-x)
FLAGS = {
    "block_size": "--block-size",
    "num_gpu_blocks": "--num-gpu-blocks",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "enable_chunked_prefill": "--enable-chunked-prefill",
    "enable_prefix_caching": "--enable-prefix-caching",
    "long_prefill_token_threshold": "--long-prefill-token-threshold",
    "policy": "--scheduling-policy",
    "watermark": "--watermark",
    "scheduler_reserve_full_isl": "--reserve-full-isl",
    "sliding_window": "--sliding-window",
    "attention_chunk_size": "--attention-chunk-size",
    "prefix_caching_hash_algo": "--prefix-caching-hash-algo",
    "max_model_len": "--max-model-len",
    "sample_token_id": "--sample-token-id",
    "enable_kv_cache_events": "--kv-events",
    "dump_block_tables": "--dump-block-tables",
    "async_scheduling": "--async-scheduling",
    "num_speculative_tokens": "--num-speculative-tokens",
    "speculative_method": "--speculative-method",
}


def replay_config(config: dict[str, Any]) -> ReplayConfig:
    """The :class:`ReplayConfig` for a steps-mode driver config (same key names)."""
    kwargs = dict(config)
    if "kv_groups" in kwargs:
        kwargs["kv_groups"] = tuple(kwargs["kv_groups"])
    return ReplayConfig(**kwargs)


def run_kvcore_steps(
    config: dict[str, Any], trace: list[dict[str, Any]], max_steps: int = MAX_STEPS
) -> list[dict] | str:
    """All of kvcore's JSON lines for the case (a livelocked replay ends with an
    ``error`` line after ``max_steps`` steps), or an error message."""
    try:
        lines = []
        for line in replay(parse_trace(trace), replay_config(config)):
            lines.append(line)
            if len(lines) > max_steps:
                # The lines so far, so that the first step that differs is shown.
                lines.append({"type": "error", "error": f"did not finish in {max_steps} steps"})
                return lines
        return lines
    except Exception as e:  # noqa: BLE001 - any failure is a mismatch to report
        return f"{type(e).__name__}: {e}"


def replay_command(config: dict[str, Any], trace_path: str) -> str:
    """The ``kvsim replay`` arguments that reproduce the case."""
    args = [trace_path]
    for key, value in config.items():
        flag = FLAGS.get(key)
        if key == "kv_groups":
            args += ["--kv-groups", ",".join(value)]
        elif flag is None or value is None:
            continue
        elif isinstance(value, bool):
            args.append(flag if value else "--no-" + flag[2:])
        else:
            args += [flag, str(value)]
    return " ".join(args)
