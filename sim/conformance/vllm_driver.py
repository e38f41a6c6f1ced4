"""Oracle driver: run vLLM 0.33.0's real scheduler and KV-cache core on a CPU.

This script is executed by the interpreter of the oracle virtual environment
(``.venv-vllm/bin/python``); kvsim never imports it. It uses only the standard
library and vLLM. It writes JSON lines that ``kvsim replay`` also writes, so the
two can be diffed line by line.

Modes
-----
``steps TRACE --config CFG [--out FILE]``
    Replay a step-indexed trace through ``vllm.v1.core.sched.scheduler.Scheduler``
    with a fake model that samples ``sample_token_id`` for every request whose
    prefill completed in the step. Output: a header line, one ``step`` line per
    scheduler step, and a summary line.
    With ``async_scheduling`` true it builds vLLM's ``AsyncScheduler`` instead and
    runs vLLM's own ``EngineCore.step_with_batch_queue`` (on an engine shell holding
    only the scheduler and a fake executor; batch queue size from
    ``VllmConfig.max_concurrent_batches``): the fake executor decides at execution
    (right after ``schedule()``) which requests sample, and the output is applied
    when the engine core pops that batch. One ``step`` line per engine iteration,
    with ``applied_step``, ``new_tokens``, ``in_flight`` and per-request
    ``placeholders`` added (the schema of ``kvcore.replay``).
``ops OPS --config CFG [--out FILE]``
    Drive ``KVCacheManager`` op by op (add, get_computed_blocks, allocate_slots,
    block_hashes, append_tokens, free, reset_prefix_cache, get_block_ids,
    new_step). One ``op`` line per op, after a header; a summary at the end.
``sizing CFG [--out FILE]``
    Print vLLM's own KV-cache sizing (number of blocks, groups, tensors) for a
    layer list and an amount of memory per worker.
``batch JOBS``
    Run many jobs (``[{"mode", "trace"|"ops"|"sizing", "config", "out"}]``, or
    ``{"mode": "cudagraph", "cases", "out"}``: vLLM's CUDA graph capture sizes per case,
    ``cudagraph_driver.py``) in one process so that vLLM is imported only once.

Request set-up (kvsim must mirror it)
-------------------------------------
* Requests are sorted stably by ``arrival_step``; request ``i`` in that order gets
  ``arrival_time = arrival_step + i * 1e-9``; ``SamplingParams(max_tokens=...,
  ignore_eos=True)``.
* ``priority`` (int, default 0) is passed as the request's priority.
* ``cache_salt`` (str) is passed as the request's ``cache_salt``: vLLM adds the
  extra key ``("cache_salt", salt)`` to the first block's hash only.
* ``lora_id`` (int >= 1) becomes ``LoRARequest(lora_name=f"lora{lora_id}",
  lora_int_id=lora_id, lora_path=f"/lora/{lora_id}")``, so every block hash of
  the request gets the extra key ``("lora", f"lora{lora_id}", f"/lora/{lora_id}")``
  (in front of the cache-salt key on block 0). No ``LoRAConfig`` is built, so
  the scheduler's ``max_loras`` admission limit is not active.
* NONE_HASH: vLLM derives it as ``hash_fn(seed)`` where the seed is
  ``PYTHONHASHSEED`` if set, else ``"vllm-none-hash"`` for sha256/sha256_cbor and
  random bytes for xxhash/xxhash_cbor. To make every algorithm deterministic the
  driver sets ``PYTHONHASHSEED`` to ``none_hash_seed`` (config knob, default
  ``"vllm-none-hash"``) just while calling vLLM's ``init_none_hash``. kvsim
  reproduces it as ``NONE_HASH = hash_fn("vllm-none-hash")`` with the configured
  algorithm (e.g. ``xxh3_128(pickle.dumps(seed, HIGHEST_PROTOCOL))`` for xxhash);
  the header records both the seed and the resulting hash in hex.
* ``abort_step`` (int >= arrival_step): the request is aborted after the adds of that
  step, before its ``schedule()``: one abort call per request, in arrival order
  (``EngineCore.abort_requests`` with the async engine shell; the same
  ``Scheduler.finish_requests(ids, FINISHED_ABORTED)`` call in the synchronous
  replay). ``abort_in_step`` (int >= arrival_step, at most one request per step): the
  abort comes while that step runs: the synchronous replay aborts after
  ``schedule()``, before ``update_from_output`` (as ``EngineCore.step`` reads its
  aborts queue); the async one puts it in the engine shell's ``aborts_queue`` before
  calling ``step_with_batch_queue``, which reads it before applying an output; when
  that iteration applies none, the abort is made at the start of the next step (its
  copy in the input queue). A step line whose aborts ended requests lists them under
  ``aborted`` (those before ``schedule()`` first).
* Speculative decoding (``num_speculative_tokens`` > 0, ``speculative_method`` ngram
  | ngram_gpu | draft_model | eagle | eagle3): vLLM's ``SpeculativeConfig`` on the
  tiny model (draft_model: the model itself; eagle / eagle3: a one-layer head); the
  fake model drafts and accepts by the rules of ``kvcore/replay_spec.py`` (loaded by
  path: the same file kvcore's replay uses). A request that verifies drafts samples
  ``1 + accepted`` tokens; after a synchronous step that ran (and did not set
  ``skip_drafts``) its scheduled requests get their next drafts through
  ``update_draft_token_ids`` (vLLM's ``EngineCore.post_step``). Step lines then add
  per scheduled request ``spec`` and per step ``skip_drafts`` and ``spec_decoding``.

Steps config keys (defaults in brackets)
----------------------------------------
block_size [16], num_gpu_blocks (required), enable_prefix_caching [true],
prefix_caching_hash_algo [sha256], max_num_seqs [128], max_num_batched_tokens
[2048], max_num_scheduled_tokens [= max_num_batched_tokens],
enable_chunked_prefill [true], long_prefill_token_threshold [0], policy [fcfs],
watermark [0.0], scheduler_reserve_full_isl [true], max_model_len [null: max of
prompt + max_tokens], use_v2_model_runner [true], kv_groups [["full"]]
(``full`` | ``sliding_window`` | ``chunked_local``), sliding_window,
attention_chunk_size, sample_token_id [7], enable_kv_cache_events [false],
dump_block_tables [false], num_speculative_tokens [0], speculative_method [ngram],
none_hash_seed
[vllm-none-hash], async_scheduling [false]. The header's ``config`` echoes the keys
of vLLM's samples only (kv_groups and window sizes show up as ``coordinator`` /
``managers``).

Ops: ``add`` takes request_id, prompt_token_ids and optional max_tokens,
priority, cache_salt, lora_id, arrival_time; ``allocate_slots`` takes
num_new_tokens (int, or "rest" = num_tokens - num_computed - pending hit) and
optional num_lookahead_tokens / full_sequence_must_fit, uses the hit of the
request's last ``get_computed_blocks``, records prefix-cache stats on success
when a lookup preceded it, advances num_computed_tokens by hit + new tokens,
and reports ``new_block_ids: null`` when vLLM refuses the allocation.

Ops config keys: num_gpu_blocks, block_size [16], enable_caching [true],
hash_algo [sha256], kv_groups, sliding_window, attention_chunk_size,
enable_kv_cache_events [false], max_model_len [8192], watermark [0.0],
none_hash_seed.

Sizing config keys: layers (list of {kind, count, num_kv_heads, head_size,
dtype, sliding_window, attention_chunk_size}; kind full | sliding_window |
chunked_local | mla; layers are numbered in list order), block_size [16],
available_bytes (one int, or a list with one value per worker), num_workers
[1], max_model_len [4096], hybrid_kv_cache_manager [true], kv_cache_layout
[LBNHC] (both forced as a GPU engine would resolve them).

Layout
------
This file is the entry point (the command line, ``run_job`` / ``run_batch``, the
writers); the modes live beside it, one file each, loaded by path through
``oracle_load.py``: ``oracle_config.py`` (the knobs' defaults, the tiny model,
NONE_HASH, ``VllmConfig``), ``oracle_common.py`` (request set-up, input documents,
event JSON), ``oracle_scheduler.py`` (building the scheduler, the fake model's samples
and drafts, a step's counters), ``oracle_steps.py`` (the synchronous replay),
``oracle_async.py`` (the async replay: fake executors, engine shell),
``oracle_ops.py`` and ``oracle_sizing.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable
from typing import Any

from oracle_load import load_by_path

oracle_config = load_by_path("oracle_config.py")
oracle_common = load_by_path("oracle_common.py")
StepReplay = load_by_path("oracle_steps.py").StepReplay
AsyncStepReplay = load_by_path("oracle_async.py").AsyncStepReplay
run_ops = load_by_path("oracle_ops.py").run_ops
run_sizing = load_by_path("oracle_sizing.py").run_sizing

TIMING_KEYS = ("build_s", "wall_s", "sched_loop_s", "steps_per_s")


def run_steps(trace: Any, config: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """Replay a trace (path or list) with the given knobs."""
    cfg = oracle_config.merged(oracle_config.STEPS_DEFAULTS, config)
    cls = AsyncStepReplay if cfg["async_scheduling"] else StepReplay
    return cls(oracle_common.load_json(trace), cfg, oracle_common.source_name(trace)).run()


# --------------------------------------------------------------------------- #
# output and CLI
# --------------------------------------------------------------------------- #
def write_lines(lines: Iterable[dict[str, Any]], out: str | None) -> None:
    """Write JSON lines to a file, or to stdout when out is None."""
    if out is None:
        for line in lines:
            sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        return
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def write_sizing(config: dict[str, Any], out: str | None) -> None:
    """Write the sizing result as indented JSON (like kvcfg_*.json)."""
    (result,) = list(run_sizing(config))
    text = json.dumps(result, indent=1) + "\n"
    if out is None:
        sys.stdout.write(text)
        return
    with open(out, "w") as f:
        f.write(text)


def run_job(job: dict[str, Any]) -> None:
    """Run one batch job and write its output."""
    mode = job["mode"]
    config = oracle_common.load_json(job.get("config", {}))
    out = job.get("out")
    if mode == "steps":
        write_lines(run_steps(job["trace"], config), out)
    elif mode == "ops":
        write_lines(run_ops(job["ops"], config), out)
    elif mode == "sizing":
        write_sizing(config, out)
    elif mode == "cudagraph":  # vLLM's capture sizes (cudagraph_driver.py, beside this)
        sizes = load_by_path("cudagraph_driver.py").sizes_of
        write_lines(({"sizes": sizes(case)} for case in job["cases"]), out)
    else:
        raise ValueError(f"unknown mode {mode!r}")


def run_batch(jobs: list[dict[str, Any]], keep_going: bool) -> int:
    """Run every job in this process; returns the number of failed jobs."""
    failures = 0
    for i, job in enumerate(jobs):
        t0 = time.perf_counter()
        try:
            run_job(job)
        except Exception as exc:
            failures += 1
            print(f"job {i} ({job.get('out')}): {type(exc).__name__}: {exc}", file=sys.stderr)
            if not keep_going:
                raise
        else:
            print(f"job {i} done in {time.perf_counter() - t0:.3f}s", file=sys.stderr)
    return failures


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line interface."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    for mode, what in (("steps", "trace"), ("ops", "op list")):
        s = sub.add_parser(mode, help=f"replay a {what}")
        s.add_argument("input", help=f"{what} JSON file")
        s.add_argument("--config", required=True, help="config JSON file")
        s.add_argument("--out", help="output JSONL file (default stdout)")
    s = sub.add_parser("sizing", help="vLLM's KV-cache sizing")
    s.add_argument("config", help="sizing config JSON file")
    s.add_argument("--out", help="output JSON file (default stdout)")
    s = sub.add_parser("batch", help="run many jobs in one process")
    s.add_argument("jobs", help="JSON file listing jobs")
    s.add_argument("--keep-going", action="store_true", help="continue after a failed job")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    if args.mode == "steps":
        write_lines(run_steps(args.input, oracle_common.load_json(args.config)), args.out)
    elif args.mode == "ops":
        write_lines(run_ops(args.input, oracle_common.load_json(args.config)), args.out)
    elif args.mode == "sizing":
        write_sizing(oracle_common.load_json(args.config), args.out)
    else:
        return 1 if run_batch(oracle_common.load_json(args.jobs), args.keep_going) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
