"""Command line of ``kvsim replay`` / ``python -m kvcore.replay``.

Flags use vLLM's engine-argument names. Bad input exits with status 2 and one
message on stderr, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from kvcore.replay import KV_GROUP_KINDS, ReplayConfig, replay
from kvcore.replay_trace import load_trace

_GROUP_ALIASES = {
    "sliding": "sliding_window",
    "swa": "sliding_window",
    "local": "chunked_local",
    "chunked": "chunked_local",
}


def _bool_flag(p: argparse.ArgumentParser, name: str, default: bool, help: str) -> None:
    p.add_argument(
        f"--{name}",
        dest=name.replace("-", "_"),
        action=argparse.BooleanOptionalAction,
        default=default,
        help=help,
    )


def build_parser(prog: str = "kvsim replay") -> argparse.ArgumentParser:
    d = ReplayConfig()
    p = argparse.ArgumentParser(
        prog=prog,
        description="Replay a step-indexed trace through kvcore's V1 scheduler "
        "with a fake model; print one JSON line per engine step (what vLLM 0.33.0 schedules).",
    )
    p.add_argument(
        "trace",
        help="JSON list of {request_id, arrival_step, prompt_token_ids, "
        "max_tokens[, priority, cache_salt, lora_id]}",
    )
    p.add_argument("--out", default="-", help="output file (default: stdout)")
    p.add_argument("--block-size", type=int, default=d.block_size, help="tokens per KV block")
    p.add_argument(
        "--num-gpu-blocks",
        type=int,
        default=d.num_gpu_blocks,
        help="KV blocks in the pool, including the null block",
    )
    p.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    p.add_argument("--max-num-batched-tokens", type=int, default=d.max_num_batched_tokens)
    _bool_flag(p, "enable-chunked-prefill", d.enable_chunked_prefill, "split long prompts")
    _bool_flag(p, "enable-prefix-caching", d.enable_prefix_caching, "reuse cached blocks")
    p.add_argument(
        "--long-prefill-token-threshold", type=int, default=d.long_prefill_token_threshold
    )
    p.add_argument("--scheduling-policy", dest="policy", default=d.policy, help="fcfs or priority")
    p.add_argument(
        "--watermark",
        type=float,
        default=d.watermark,
        help="fraction of blocks kept free when admitting",
    )
    _bool_flag(
        p, "reserve-full-isl", d.scheduler_reserve_full_isl, "admit only if the whole sequence fits"
    )
    p.add_argument(
        "--kv-groups",
        default="full",
        help=f"comma-separated group kinds: {', '.join(KV_GROUP_KINDS)}",
    )
    p.add_argument("--sliding-window", type=int, default=None)
    p.add_argument("--attention-chunk-size", type=int, default=None)
    p.add_argument(
        "--prefix-caching-hash-algo",
        default=d.prefix_caching_hash_algo,
        help="sha256, sha256_cbor, xxhash or xxhash_cbor",
    )
    p.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="default: largest prompt + max_tokens of the trace",
    )
    p.add_argument("--sample-token-id", type=int, default=d.sample_token_id)
    p.add_argument(
        "--none-hash-seed",
        default=d.none_hash_seed,
        help="seed of the first block's parent hash (vLLM: PYTHONHASHSEED or 'vllm-none-hash')",
    )
    p.add_argument(
        "--num-lookahead-tokens",
        type=int,
        default=0,
        help="speculative lookahead slots reserved per step",
    )
    _bool_flag(p, "kv-events", False, "add KV cache events to each step")
    _bool_flag(p, "dump-block-tables", False, "add each scheduled request's block table")
    return p


def config_from_args(args: argparse.Namespace) -> ReplayConfig:
    groups = tuple(_GROUP_ALIASES.get(g.strip(), g.strip()) for g in args.kv_groups.split(","))
    return ReplayConfig(
        block_size=args.block_size,
        num_gpu_blocks=args.num_gpu_blocks,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        enable_chunked_prefill=args.enable_chunked_prefill,
        enable_prefix_caching=args.enable_prefix_caching,
        long_prefill_token_threshold=args.long_prefill_token_threshold,
        policy=args.policy,
        watermark=args.watermark,
        scheduler_reserve_full_isl=args.reserve_full_isl,
        kv_groups=groups,
        sliding_window=args.sliding_window,
        attention_chunk_size=args.attention_chunk_size,
        prefix_caching_hash_algo=args.prefix_caching_hash_algo,
        max_model_len=args.max_model_len,
        sample_token_id=args.sample_token_id,
        num_lookahead_tokens=args.num_lookahead_tokens,
        enable_kv_cache_events=args.kv_events,
        dump_block_tables=args.dump_block_tables,
        none_hash_seed=args.none_hash_seed,
    )


def main(argv: Sequence[str] | None = None, prog: str = "python -m kvcore.replay") -> int:
    """Run the replay; return the exit status (0 ok, 2 bad input)."""
    args = build_parser(prog).parse_args(argv)
    try:
        config = config_from_args(args)
        trace = load_trace(args.trace)
        lines = [json.dumps(rec) for rec in replay(trace, config, args.trace)]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = "\n".join(lines) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        import os
        import tempfile

        out_dir = os.path.dirname(os.path.abspath(args.out))
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".replay-", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, args.out)
    return 0
