"""kvcore's replay of a CPU-offload conformance case (:mod:`sim.conformance.offload`):
kvcore's :class:`~kvcore.scheduler.Scheduler` with
:class:`~kvcore.offloading_connector.OffloadingConnectorScheduler` and the fake worker
both replays share, one line per step (:class:`KvcoreOffloadReplay`); with
``async_scheduling`` an ``AsyncScheduler`` behind :class:`kvcore.batch_queue.BatchQueue`,
one line per iteration (:class:`AsyncKvcoreReplay`). The lines are those of
``offload_driver.py`` (fields from :mod:`sim.conformance.offload_lines`).
"""

from __future__ import annotations

from typing import Any

from kvcore.batch_queue import BatchQueue
from kvcore.block_hashing import BlockHasher
from kvcore.cpu_offload_manager import CPUOffloadingManager
from kvcore.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from kvcore.offloading_connector import KVConnectorOutput, OffloadingConnectorScheduler
from kvcore.request import LoRARequest, Request, RequestStatus
from kvcore.sched_output import EngineStepOutput, SchedulerOutput
from kvcore.scheduler import Scheduler
from sim.conformance import offload_lines
from sim.conformance.kvcore_connector import connector_scheduler
from sim.conformance.offload_lines import WorkerReport
from sim.conformance.offload_worker import FakeOffloadWorker
from sim.conformance.step_loop import replay_steps
from sim.conformance.trace_feed import TraceFeed, summary_line


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


def cpu_json(manager: CPUOffloadingManager) -> dict[str, Any]:
    """The CPU tier's state in a step line."""
    return offload_lines.cpu_line(
        manager.policy.chunks, manager.num_evictable_chunks, manager.num_write_pending_chunks
    )


def _max_model_len(cfg: dict[str, Any], trace: list[dict[str, Any]]) -> int:
    """The case's ``max_model_len`` (tokens): its knob, else the longest request."""
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
    return connector_scheduler(
        cfg, max_model_len, kv_config, connector, watermark=float(cfg["watermark"])
    )


def _job_line(job_id: int, job: Any) -> list[Any]:
    """One load or store job of kvcore's connector metadata."""
    return offload_lines.job_line(job_id, job.req_id, job.keys, job.gpu_block_ids, job.chunk_ids)


def _prefix_json(stats: Any) -> dict[str, int]:
    """The GPU prefix-cache counters of an applied output (zeros without stats)."""
    keys = ("requests", "queries", "hits", "preempted_requests", "preempted_queries")
    keys += ("preempted_hits",)
    return {k: int(getattr(stats, k, 0)) if stats else 0 for k in keys}


class KvcoreOffloadReplay:
    """kvcore's replay of a case without async scheduling: one line per
    ``schedule()`` and ``update_from_output`` (:meth:`run`)."""

    def __init__(self, cfg: dict[str, Any], trace: list[dict[str, Any]]) -> None:
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

    def has_work(self) -> bool:
        """Whether the scheduler still holds requests."""
        return self.sched.has_requests()

    def run(self) -> list[dict[str, Any]]:
        """The case's lines: header, steps, summary."""
        header = offload_lines.header_line("0.33.0", self.manager.num_chunks, self.max_model_len)
        feed = trace_feed(self.trace, self.sched, self.hasher)
        lines, steps = replay_steps(feed, self.has_work, self.step_line, offload_lines.MAX_STEPS)
        return [header, *lines, summary_line(steps, self.pool.get_num_free_blocks())]

    def batch(self, step: int, out: SchedulerOutput) -> tuple[dict[str, Any], WorkerReport]:
        """Right after ``schedule()``: the batch's fields, with its jobs handed to the
        fake worker in step ``step``, and the worker's report."""
        free_after = self.pool.get_num_free_blocks()
        meta = out.kv_connector_metadata
        assert meta is not None
        loads = [_job_line(j, job) for j, job in sorted(meta.load_jobs.items())]
        stores = [_job_line(j, job) for j, job in sorted(meta.store_jobs.items())]
        report = offload_lines.worker_round(self.worker, step, meta)
        return offload_lines.batch_fields(out, free_after, loads, stores, report), report

    def applied(self, result: EngineStepOutput) -> dict[str, Any]:
        """The applied output's finishes and counters (the connector's are read and
        restarted, as vLLM's ``make_stats`` does)."""
        cstats = self.sched.connector_prefix_cache_stats
        connector = offload_lines.connector_counts(cstats)
        if cstats is not None:
            self.sched.connector_prefix_cache_stats = type(cstats)()
        return offload_lines.applied_fields(
            list(result.finished_req_ids), _prefix_json(result.prefix_cache_stats), connector
        )

    def state(self) -> dict[str, Any]:
        """The scheduler's state at the end of a step (``offload_lines.state_fields``)."""
        sched = self.sched
        return offload_lines.state_fields(
            self.pool.get_num_free_blocks(),
            len(sched.running),
            len(sched.waiting) + len(sched.kv_holding_waiting),
            offload_lines.waiting_for_kv(
                sched.requests.values(), RequestStatus.WAITING_FOR_REMOTE_KVS
            ),
            cpu_json(self.manager),
        )

    def step_line(self, step: int, aborted: list[str]) -> dict[str, Any]:
        """Schedule, run the fake worker and model (a request samples once its tokens
        are all computed), apply the output; the step's line."""
        sched = self.sched
        out = sched.schedule()
        batch, report = self.batch(step, out)
        sampled = {}
        for rid in out.num_scheduled_tokens:
            req = sched.requests[rid]
            sampled[rid] = [self.token] if req.num_computed_tokens >= req.num_tokens else []
        kv_output = KVConnectorOutput(set(report.recving), report.completed)
        applied = self.applied(sched.update_from_output(out, sampled, kv_output))
        return offload_lines.sync_line(step, aborted, batch, applied, self.state())


class AsyncKvcoreReplay(KvcoreOffloadReplay):
    """kvcore's replay of a case with async scheduling: one line per iteration of the
    batch queue (:class:`kvcore.batch_queue.BatchQueue` over an ``AsyncScheduler``
    with the connector); the fake worker takes each batch's metadata right after
    ``schedule()`` and its report travels with the batch's output."""

    def __init__(self, cfg: dict[str, Any], trace: list[dict[str, Any]]) -> None:
        super().__init__(cfg, trace)
        self.step_index = 0
        self.executed: list[dict[str, Any]] = []
        self.queue = BatchQueue(self.sched, self._sample, kv_worker=self._kv_worker)

    def has_work(self) -> bool:
        """Whether the batch queue still has requests or batches in flight."""
        return self.queue.has_work()

    def _sample(self, sched: Scheduler, out: SchedulerOutput) -> dict[str, list[int]]:
        """The fake model's tokens: one for each request past its prefill chunks."""
        reqs = sched.requests
        return {
            rid: [self.token] for rid in out.num_scheduled_tokens if not reqs[rid].is_prefill_chunk
        }

    def _kv_worker(self, sched: Scheduler, out: SchedulerOutput) -> KVConnectorOutput:
        """The batch queue's worker call after ``schedule()``: record the batch's
        fields; the worker's report as the connector output."""
        fields, report = self.batch(self.step_index, out)
        self.executed.append(fields)
        return KVConnectorOutput(set(report.recving), report.completed)

    def step_line(self, step: int, aborted: list[str]) -> dict[str, Any]:
        """One iteration of the batch queue; its line."""
        self.step_index = step
        it = self.queue.step()
        executed, self.executed = self.executed, []
        applied_step = it.applied.step if it.applied is not None else None
        fields = offload_lines.nothing_applied() if it.output is None else self.applied(it.output)
        return offload_lines.async_line(
            step,
            aborted,
            executed[0] if executed else None,
            applied_step,
            fields,
            self.state(),
            self.queue.in_flight_steps(),
        )
