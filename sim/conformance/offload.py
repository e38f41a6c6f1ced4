"""Differential conformance of the CPU KV offload tier: kvcore against vLLM 0.33.0.

Each case is a step trace plus knobs (GPU blocks, CPU chunks, chunk size, transfer
latencies...). vLLM's real ``Scheduler`` with its ``OffloadingConnector`` in the
scheduler role (``offload_driver.py``, run in the oracle environment) and kvcore's
:class:`~kvcore.scheduler.Scheduler` with
:class:`~kvcore.offloading_connector.OffloadingConnectorScheduler` replay it with the
same fake worker (:class:`~sim.conformance.offload_worker.FakeOffloadWorker`); every
step line must be equal: what was scheduled, preemptions, finished and aborted
requests, free GPU blocks, requests waiting for their KV, each load and store job
(its request, offload keys, GPU blocks and CPU chunks), the jobs flushed, the jobs
and loads the worker reported, the CPU tier's contents (keys held, evictable and
write-pending counts) and the GPU and connector prefix-cache counters.

With ``async_scheduling`` a case runs vLLM's ``AsyncScheduler`` behind the engine
core's ``step_with_batch_queue`` (``offload_driver.run_steps_async``) and kvcore's
behind :class:`kvcore.batch_queue.BatchQueue`, one line per engine iteration: the
batch scheduled (its jobs and the worker's report for it), the batch whose output
was applied, the batches in flight.

kvcore's replays are in :mod:`sim.conformance.offload_kvcore`, the line fields both
sides write in :mod:`sim.conformance.offload_lines`. Capacity cases compare
:func:`kvcore.cpu_offload_manager.cpu_offload_num_chunks` with vLLM's
``CPUOffloadingSpec``.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

from kvcore.cpu_offload_manager import cpu_offload_num_chunks
from sim.conformance.compare import compare_case as compare  # noqa: F401 (re-exported)
from sim.conformance.offload_case import DEFAULTS
from sim.conformance.offload_kvcore import AsyncKvcoreReplay, KvcoreOffloadReplay
from sim.conformance.oracle_jobs import read_jsonl, run_oracle_jobs

DRIVER = Path(__file__).resolve().parent / "offload_driver.py"


def run_kvcore(cfg_in: dict[str, Any], trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kvcore's lines for a case (the schema of ``offload_driver.run_steps``, or of
    ``offload_driver.run_steps_async`` with ``async_scheduling``)."""
    cfg = dict(DEFAULTS, **cfg_in)
    if cfg["async_scheduling"]:
        return AsyncKvcoreReplay(cfg, trace).run()
    return KvcoreOffloadReplay(cfg, trace).run()


def run_kvcore_or_error(cfg: dict[str, Any], trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`run_kvcore`, with a failure (an exception, no end) as one error line."""
    try:
        return run_kvcore(cfg, trace)
    except Exception as e:  # noqa: BLE001 - any failure is a mismatch to report
        return [{"type": "error", "error": f"{type(e).__name__}: {e}"}]


# -- cases ---------------------------------------------------------------------------


def random_case(seed: int, index: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One random case: shared prompt prefixes arriving over time, a small GPU cache
    (prefix blocks leave it, preemptions), a small CPU tier (evictions, refused
    stores), transfer latencies of 1-4 steps, and sometimes aborts."""
    rng = random.Random(f"offload-{seed}-{index}")
    bs = 16
    bpc = rng.choice([1, 1, 1, 2])
    num_groups = rng.choice([1, 1, 1, 2])
    cfg: dict[str, Any] = {
        "block_size": bs,
        "num_gpu_blocks": rng.randint(10, 40) * num_groups,
        "max_num_seqs": rng.randint(2, 8),
        "max_num_batched_tokens": rng.choice([64, 128, 256]),
        "long_prefill_token_threshold": rng.choice([0, 0, 0, 32]),
        "policy": rng.choice(["fcfs", "fcfs", "priority"]),
        "kv_groups": ["full"] * num_groups,
        "cpu_chunks": rng.randint(4, 48),
        "blocks_per_chunk": bpc,
        "offload_prompt_only": rng.random() < 0.8,
        "load_latency": rng.randint(1, 4),
        "store_latency": rng.randint(1, 4),
    }
    prefixes = [
        [rng.randrange(50_000) for _ in range(rng.choice([32, 48, 64, 80, 96]))]
        for _ in range(rng.randint(1, 3))
    ]
    trace = []
    step = 0
    for i in range(rng.randint(6, 24)):
        step += rng.choice([0, 0, 1, 2, 4, 8, 16])
        prompt = list(rng.choice(prefixes))
        prompt += [rng.randrange(50_000) for _ in range(rng.choice([0, 0, 5, 16, 23, 40]))]
        req: dict[str, Any] = {
            "request_id": f"r{i}",
            "arrival_step": step,
            "prompt_token_ids": prompt,
            "max_tokens": rng.randint(1, 40),
            "priority": rng.randint(0, 2),
        }
        if rng.random() < 0.15:
            req["abort_step"] = step + rng.randint(0, 8)
        trace.append(req)
    # Every request must fit the GPU cache on its own (else vLLM and kvcore both
    # livelock, as an engine whose max_model_len exceeds its KV cache would).
    longest = max(len(r["prompt_token_ids"]) + r["max_tokens"] for r in trace)
    min_blocks = (-(-longest // bs) + 2) * num_groups
    cfg["num_gpu_blocks"] = max(cfg["num_gpu_blocks"], min_blocks)
    if rng.random() < 0.2:  # whole prefills: the budget must hold max_model_len
        cfg["enable_chunked_prefill"] = False
        cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], longest)
    return cfg, trace


CAPACITY_CASES = [
    {"cpu_bytes_to_use": b, "worker_kv_bytes_per_block": p, "blocks_per_chunk": c, "world_size": w}
    for b, p, c, w in [
        (10 * (1 << 30), 131072 * 32, 1, 1),  # 10 GiB, Llama-8B-like block (bf16, 32 layers)
        (10 * (1 << 30), 65536 * 32, 1, 2),  # TP 2: each worker half the heads
        (4 * (1 << 30), 131072 * 32, 4, 1),  # 64-token chunks
        (1 << 30, 6000, 1, 1),  # a block that is not a multiple of 4 KiB
        (1 << 30, 6000, 3, 4),
        (123_456_789, 1000, 1, 1),
        (4096 * 7, 128, 1, 1),  # the conformance cases' tiny tier
    ]
]


def run_capacity_kvcore() -> list[dict[str, Any]]:
    return [
        dict(
            c,
            num_chunks=cpu_offload_num_chunks(
                c["cpu_bytes_to_use"],
                c["worker_kv_bytes_per_block"],
                c["blocks_per_chunk"],
                c["world_size"],
            ),
        )
        for c in CAPACITY_CASES
    ]


def run_oracle(
    vllm_python: str, cases: list[tuple[dict[str, Any], list[dict[str, Any]]]], timeout: float
) -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    """vLLM's lines for every case (one oracle process), and its capacity answers."""
    with tempfile.TemporaryDirectory(prefix="kvsim-offload-") as tmp:
        work = Path(tmp)
        jobs: list[dict[str, Any]] = [
            {"mode": "steps", "config": c, "trace": t, "out": str(work / f"case{i}.jsonl")}
            for i, (c, t) in enumerate(cases)
        ]
        jobs.append({"mode": "capacity", "cases": CAPACITY_CASES, "out": str(work / "cap.jsonl")})
        run_oracle_jobs(vllm_python, DRIVER, jobs, work, timeout, "offload")
        cases_out = [read_jsonl(work / f"case{i}.jsonl") for i in range(len(cases))]
        return cases_out, read_jsonl(work / "cap.jsonl")
