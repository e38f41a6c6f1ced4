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
behind :class:`kvcore.batch_queue.BatchQueue` (:class:`AsyncKvcoreReplay`), one line
per engine iteration: the batch scheduled (its jobs and the worker's report for it),
the batch whose output was applied, the batches in flight.

Capacity cases compare :func:`kvcore.cpu_offload_manager.cpu_offload_num_chunks` with
vLLM's ``CPUOffloadingSpec``.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

from kvcore.async_scheduler import AsyncScheduler
from kvcore.batch_queue import BatchQueue
from kvcore.block_hashing import BlockHasher
from kvcore.cpu_offload_manager import CPUOffloadingManager, cpu_offload_num_chunks
from kvcore.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from kvcore.offloading_connector import KVConnectorOutput, OffloadingConnectorScheduler
from kvcore.request import LoRARequest, Request, RequestStatus
from kvcore.sched_output import EngineStepOutput, SchedulerOutput
from kvcore.scheduler import Scheduler
from kvcore.scheduler_config import SchedulerConfig
from sim.conformance.compare import compare_case as compare  # noqa: F401 (re-exported)
from sim.conformance.offload_case import DEFAULTS
from sim.conformance.offload_worker import FakeOffloadWorker
from sim.conformance.oracle_jobs import read_jsonl, run_oracle_jobs
from sim.conformance.trace_feed import TraceFeed, summary_line

DRIVER = Path(__file__).resolve().parent / "offload_driver.py"


def trace_feed(trace: list[dict[str, Any]], sched: Scheduler, hasher: Any) -> TraceFeed:
    """The trace's arrivals and aborts for kvcore's scheduler ``sched``."""

    def add(spec: dict[str, Any], arrival: float) -> None:
        lora = spec.get("lora_id")
        sched.add_request(
            Request(
                str(spec["request_id"]),
                list(spec["prompt_token_ids"]),
                int(spec["max_tokens"]),
                arrival_time=arrival,
                priority=int(spec.get("priority", 0)),
                lora_request=LoRARequest.from_id(lora) if lora else None,
                cache_salt=spec.get("cache_salt"),
                block_hasher=hasher,
            )
        )

    def abort(rid: str) -> list[str]:
        return [r.request_id for r in sched.finish_requests([rid], RequestStatus.FINISHED_ABORTED)]

    return TraceFeed(trace, add, abort)


def _short_key(key: bytes) -> str:
    return key[:6].hex() + ":" + str(int.from_bytes(key[-4:], "big"))


def cpu_json(manager: CPUOffloadingManager) -> dict[str, Any]:
    """The CPU tier's state in a step line."""
    return {
        "keys": sorted(map(_short_key, manager.policy.chunks)),
        "evictable": manager.num_evictable_chunks,
        "write_pending": manager.num_write_pending_chunks,
    }


def _max_model_len(cfg: dict[str, Any], trace: list[dict[str, Any]]) -> int:
    if cfg["max_model_len"] is not None:
        return int(cfg["max_model_len"])
    return max(len(r["prompt_token_ids"]) + int(r["max_tokens"]) for r in trace)


def build_kvcore(cfg: dict[str, Any], max_model_len: int) -> Scheduler:
    """kvcore's scheduler with the offloading connector, from a case's knobs."""
    groups = [
        KVCacheGroupSpec([f"layer{i}"], FullAttentionSpec(block_size=cfg["block_size"]))
        for i, _ in enumerate(cfg["kv_groups"])
    ]
    kv_config = KVCacheConfig(
        num_blocks=int(cfg["num_gpu_blocks"]), kv_cache_tensors=[], kv_cache_groups=groups
    )
    connector = OffloadingConnectorScheduler(
        kv_config,
        num_cpu_chunks=int(cfg["cpu_chunks"]),
        blocks_per_chunk=int(cfg["blocks_per_chunk"]),
        offload_prompt_only=bool(cfg["offload_prompt_only"]),
    )
    sched_config = SchedulerConfig(
        max_model_len=max_model_len,
        max_num_batched_tokens=int(cfg["max_num_batched_tokens"]),
        max_num_seqs=int(cfg["max_num_seqs"]),
        enable_chunked_prefill=bool(cfg["enable_chunked_prefill"]),
        long_prefill_token_threshold=int(cfg["long_prefill_token_threshold"]),
        policy=cfg["policy"],
        scheduler_reserve_full_isl=bool(cfg["scheduler_reserve_full_isl"]),
    )
    cls = AsyncScheduler if cfg["async_scheduling"] else Scheduler
    return cls(sched_config, kv_config, watermark=float(cfg["watermark"]), connector=connector)


def run_kvcore(cfg_in: dict[str, Any], trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kvcore's lines for a case (the schema of ``offload_driver.run_steps``, or of
    ``offload_driver.run_steps_async`` with ``async_scheduling``)."""
    cfg = dict(DEFAULTS, **cfg_in)
    if cfg["async_scheduling"]:
        return AsyncKvcoreReplay(cfg, trace).run()
    max_model_len = _max_model_len(cfg, trace)
    sched = build_kvcore(cfg, max_model_len)
    conn = sched.connector
    assert conn is not None
    manager = conn.manager
    hasher = BlockHasher.from_name(
        int(cfg["block_size"]), cfg["prefix_caching_hash_algo"], cfg["none_hash_seed"]
    )
    worker = FakeOffloadWorker(int(cfg["load_latency"]), int(cfg["store_latency"]))
    pool = sched.kv_cache_manager.block_pool
    lines: list[dict[str, Any]] = [
        {
            "type": "header",
            "vllm_version": "0.33.0",
            "num_cpu_chunks": manager.num_chunks,
            "max_model_len": max_model_len,
        }
    ]
    feed = trace_feed(trace, sched, hasher)
    step = 0
    token = int(cfg["sample_token_id"])
    while True:
        aborted = feed.at_step(step)
        if feed.drained and not sched.has_requests():
            break
        if step > 20000:
            raise RuntimeError("no end after 20000 steps")
        out = sched.schedule()
        free_after_schedule = pool.get_num_free_blocks()
        meta = out.kv_connector_metadata
        loads = [
            [j, job.req_id, sorted(map(_short_key, job.keys)), job.gpu_block_ids, job.chunk_ids]
            for j, job in sorted(meta.load_jobs.items())
        ]
        stores = [
            [j, job.req_id, sorted(map(_short_key, job.keys)), job.gpu_block_ids, job.chunk_ids]
            for j, job in sorted(meta.store_jobs.items())
        ]
        flush = sorted(meta.jobs_to_flush)
        worker.submit(
            step, {j: job.req_id for j, job in meta.load_jobs.items()}, list(meta.store_jobs), flush
        )
        completed, recving = worker.finished(step)
        sampled = {}
        for rid in out.num_scheduled_tokens:
            req = sched.requests[rid]
            sampled[rid] = [token] if req.num_computed_tokens >= req.num_tokens else []
        result = sched.update_from_output(out, sampled, KVConnectorOutput(set(recving), completed))
        stats = result.prefix_cache_stats
        cstats = sched.connector_prefix_cache_stats
        line = {
            "type": "step",
            "step": step,
            "scheduled": [{"id": rid, "n": n} for rid, n in out.num_scheduled_tokens.items()],
            "preempted": sorted(out.preempted_req_ids),
            "finished": list(result.finished_req_ids),
            "aborted": aborted,
            "free_blocks_after_schedule": free_after_schedule,
            "free_blocks": pool.get_num_free_blocks(),
            "num_running": len(sched.running),
            "num_waiting": len(sched.waiting) + len(sched.kv_holding_waiting),
            "waiting_for_kv": sorted(
                r.request_id
                for r in sched.requests.values()
                if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS
            ),
            "loads": loads,
            "stores": stores,
            "flush": flush,
            "completed": sorted(completed),
            "recving": recving,
            "cpu": cpu_json(manager),
            "prefix_cache": _prefix_json(stats),
            "connector_cache": [cstats.requests, cstats.queries, cstats.hits]
            if cstats
            else [0] * 3,
        }
        if cstats is not None:
            sched.connector_prefix_cache_stats = type(cstats)()
        lines.append(line)
        step += 1
    lines.append({"type": "summary", "steps": step, "free_blocks_end": pool.get_num_free_blocks()})
    return lines


def _job_json(job_id: int, job: Any) -> list[Any]:
    return [job_id, job.req_id, sorted(map(_short_key, job.keys)), job.gpu_block_ids, job.chunk_ids]


class AsyncKvcoreReplay:
    """kvcore's replay of a case with async scheduling: one line per iteration of the
    batch queue (:class:`kvcore.batch_queue.BatchQueue` over an ``AsyncScheduler``
    with the connector); the fake worker takes each batch's metadata right after
    ``schedule()`` and its report travels with the batch's output."""

    def __init__(self, cfg: dict[str, Any], trace: list[dict[str, Any]]) -> None:
        self.cfg = cfg
        self.trace = trace
        self.max_model_len = _max_model_len(cfg, trace)
        self.sched = build_kvcore(cfg, self.max_model_len)
        conn = self.sched.connector
        assert isinstance(conn, OffloadingConnectorScheduler)
        self.manager = conn.manager
        self.hasher = BlockHasher.from_name(
            int(cfg["block_size"]), cfg["prefix_caching_hash_algo"], cfg["none_hash_seed"]
        )
        self.worker = FakeOffloadWorker(int(cfg["load_latency"]), int(cfg["store_latency"]))
        self.pool = self.sched.kv_cache_manager.block_pool
        self.token = int(cfg["sample_token_id"])
        self.step_index = 0
        self.executed: list[dict[str, Any]] = []
        self.queue = BatchQueue(self.sched, self._sample, kv_worker=self._kv_worker)

    def _sample(self, sched: Scheduler, out: SchedulerOutput) -> dict[str, list[int]]:
        reqs = sched.requests
        return {
            rid: [self.token] for rid in out.num_scheduled_tokens if not reqs[rid].is_prefill_chunk
        }

    def _kv_worker(self, sched: Scheduler, out: SchedulerOutput) -> KVConnectorOutput:
        meta = out.kv_connector_metadata
        assert meta is not None
        flush = sorted(meta.jobs_to_flush)
        step = self.step_index
        self.worker.submit(
            step, {j: job.req_id for j, job in meta.load_jobs.items()}, list(meta.store_jobs), flush
        )
        completed, recving = self.worker.finished(step)
        self.executed.append(
            {
                "scheduled": [{"id": r, "n": n} for r, n in out.num_scheduled_tokens.items()],
                "preempted": sorted(out.preempted_req_ids),
                "free_blocks_after_schedule": self.pool.get_num_free_blocks(),
                "loads": [_job_json(j, job) for j, job in sorted(meta.load_jobs.items())],
                "stores": [_job_json(j, job) for j, job in sorted(meta.store_jobs.items())],
                "flush": flush,
                "completed": sorted(completed),
                "recving": recving,
            }
        )
        return KVConnectorOutput(set(recving), completed)

    def _applied_fields(self, result: EngineStepOutput | None) -> dict[str, Any]:
        """The applied output's finishes and counters (the connector's are read and
        restarted, as vLLM's ``make_stats`` does); None when no output was applied."""
        if result is None:
            return {"finished": [], "prefix_cache": None, "connector_cache": None}
        cstats = self.sched.connector_prefix_cache_stats
        connector = [0, 0, 0]
        if cstats is not None:
            connector = [cstats.requests, cstats.queries, cstats.hits]
            self.sched.connector_prefix_cache_stats = type(cstats)()
        return {
            "finished": list(result.finished_req_ids),
            "prefix_cache": _prefix_json(result.prefix_cache_stats),
            "connector_cache": connector,
        }

    def run(self) -> list[dict[str, Any]]:
        sched = self.sched
        lines: list[dict[str, Any]] = [
            {
                "type": "header",
                "vllm_version": "0.33.0",
                "num_cpu_chunks": self.manager.num_chunks,
                "max_model_len": self.max_model_len,
            }
        ]
        feed = trace_feed(self.trace, sched, self.hasher)
        while True:
            step = self.step_index
            aborted = feed.at_step(step)
            if feed.drained and not self.queue.has_work():
                break
            if step > 20000:
                raise RuntimeError("no end after 20000 steps")
            it = self.queue.step()
            executed, self.executed = self.executed, []
            line: dict[str, Any] = {"type": "step", "step": step, "aborted": aborted}
            line.update(executed[0] if executed else {"scheduled": None})
            line["applied_step"] = it.applied.step if it.applied is not None else None
            line.update(self._applied_fields(it.output))
            line.update(
                free_blocks=self.pool.get_num_free_blocks(),
                num_running=len(sched.running),
                num_waiting=len(sched.waiting) + len(sched.kv_holding_waiting),
                waiting_for_kv=sorted(
                    r.request_id
                    for r in sched.requests.values()
                    if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS
                ),
                cpu=cpu_json(self.manager),
                in_flight=self.queue.in_flight_steps(),
            )
            lines.append(line)
            self.step_index += 1
        lines.append(summary_line(self.step_index, self.pool.get_num_free_blocks()))
        return lines


def run_kvcore_or_error(cfg: dict[str, Any], trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`run_kvcore`, with a failure (an exception, no end) as one error line."""
    try:
        return run_kvcore(cfg, trace)
    except Exception as e:  # noqa: BLE001 - any failure is a mismatch to report
        return [{"type": "error", "error": f"{type(e).__name__}: {e}"}]


def _prefix_json(stats: Any) -> dict[str, int]:
    keys = ("requests", "queries", "hits", "preempted_requests", "preempted_queries")
    keys += ("preempted_hits",)
    return {k: int(getattr(stats, k, 0)) if stats else 0 for k in keys}


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
