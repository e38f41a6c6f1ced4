"""Differential conformance of P/D disaggregation: kvcore against vLLM 0.33.0.

Each case is a step trace plus knobs (the instance's role, pull or push, sync or
async scheduling, the load-failure policy, GPU blocks...) and per-request transfer
knobs for the fake worker. vLLM's real ``Scheduler`` / ``AsyncScheduler`` with its
NIXL connector in the scheduler role (``pd_driver.py``, run in the oracle
environment) and kvcore's :class:`~kvcore.scheduler.Scheduler` /
:class:`~kvcore.async_scheduler.AsyncScheduler` (behind
:class:`~kvcore.batch_queue.BatchQueue`) with
:class:`~kvcore.nixl_connector.NixlConnectorScheduler` replay it with the same fake
worker (:class:`~sim.conformance.pd_worker.FakeNixlWorker`); every step line must be
equal: what was scheduled, preemptions, finished and aborted requests, free GPU
blocks, requests waiting for their KV, finished requests still holding blocks, the
step's connector metadata (receives with their blocks, sends, batch membership,
push registrations), the worker's report, the finished requests' transfer
parameters (``remote_block_ids``, ``remote_num_tokens``...) and the prefix-cache
counters (GPU, and the connector's external hits).
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

from kvcore.batch_queue import BatchQueue
from kvcore.block_hashing import BlockHasher
from kvcore.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from kvcore.kv_connector_output import KVConnectorOutput
from kvcore.nixl_connector import NixlConnectorMetadata, NixlConnectorScheduler
from kvcore.request import Request, RequestStatus
from kvcore.sched_output import EngineStepOutput, SchedulerOutput
from kvcore.scheduler import Scheduler
from sim.conformance.compare import compare_case as compare  # noqa: F401 (re-exported)
from sim.conformance.kvcore_connector import connector_scheduler
from sim.conformance.oracle_jobs import read_jsonl, run_oracle_jobs
from sim.conformance.pd_case import DEFAULTS, kv_role, params_json
from sim.conformance.pd_worker import FakeNixlWorker
from sim.conformance.trace_feed import TraceFeed, summary_line

DRIVER = Path(__file__).resolve().parent / "pd_driver.py"


def build_kvcore(cfg: dict[str, Any], max_model_len: int) -> Scheduler:
    """kvcore's scheduler with the NIXL connector, from a case's knobs."""
    spec = FullAttentionSpec(block_size=int(cfg["block_size"]))
    kv_config = KVCacheConfig(
        num_blocks=int(cfg["num_gpu_blocks"]),
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer0"], spec)],
    )
    connector = NixlConnectorScheduler(
        kv_config,
        kv_role=kv_role(cfg),
        mode=cfg["mode"],
        engine_id="kvsim-" + cfg["role"],
        kv_load_failure_policy=cfg["kv_load_failure_policy"],
    )
    return connector_scheduler(cfg, max_model_len, kv_config, connector)


def meta_json(meta: NixlConnectorMetadata) -> dict[str, Any]:
    """The step's connector metadata in a step line (``pd_driver.meta_json``)."""
    recv = []
    for rid, m in sorted(meta.reqs_to_recv.items()):
        blocks = list(m.local_block_ids[0]) if m.local_block_ids else []
        recv.append([rid, blocks, list(m.local_num_computed_blocks), m.awaiting_kvs])
    return {
        "recv": recv,
        "send": sorted(meta.reqs_to_send),
        "in_batch": sorted(meta.reqs_in_batch),
        "not_processed": sorted(meta.reqs_not_processed),
        "push_reg": sorted([rid, list(g[0])] for rid, g in meta.push_registrations.items()),
        "push_fin": sorted(
            [rid, list(g[0]) if g else []] for rid, g in meta.push_finished_blocks.items()
        ),
    }


def _kv_output(report: dict[str, list[Any]]) -> KVConnectorOutput:
    return KVConnectorOutput(
        finished_recving=set(report["recving"]),
        finished_sending=set(report["sending"]),
        failed_recving=set(report["failed"]),
        invalid_block_ids=set(report["invalid"]),
    )


def _outputs_json(result: EngineStepOutput | None) -> tuple[list[str], dict[str, Any]]:
    if result is None:
        return [], {}
    params = {rid: params_json(p) for rid, p in result.kv_transfer_params.items()}
    return sorted(result.finished_req_ids), params


class KvcoreReplay:
    """kvcore's replay of one case (the lines of ``pd_driver.PDReplay``)."""

    def __init__(self, cfg_in: dict[str, Any], trace: list[dict[str, Any]]) -> None:
        self.cfg = cfg = dict(DEFAULTS, **cfg_in)
        self.trace = trace
        mml = cfg["max_model_len"]
        self.max_model_len = (
            int(mml)
            if mml is not None
            else max(len(r["prompt_token_ids"]) + int(r["max_tokens"]) for r in trace)
        )
        self.sched = build_kvcore(cfg, self.max_model_len)
        self.pool = self.sched.kv_cache_manager.block_pool
        self.hasher = BlockHasher.from_name(
            int(cfg["block_size"]), cfg["prefix_caching_hash_algo"], cfg["none_hash_seed"]
        )
        self.worker = FakeNixlWorker(trace, int(cfg["lease_steps"]))
        self.token = int(cfg["sample_token_id"])
        self.step_index = 0
        self.executed: list[tuple[SchedulerOutput, dict[str, Any], dict[str, Any], int]] = []
        self.queue = (
            BatchQueue(self.sched, self._sample, kv_worker=self._kv_worker)
            if cfg["async_scheduling"]
            else None
        )

    def _sample(self, sched: Scheduler, out: SchedulerOutput) -> dict[str, list[int]]:
        reqs = sched.requests
        return {
            rid: [self.token] for rid in out.num_scheduled_tokens if not reqs[rid].is_prefill_chunk
        }

    def _kv_worker(self, sched: Scheduler, out: SchedulerOutput) -> KVConnectorOutput:
        free_after = self.pool.get_num_free_blocks()
        assert isinstance(out.kv_connector_metadata, NixlConnectorMetadata)
        meta = meta_json(out.kv_connector_metadata)
        report = self.worker.step(self.step_index, meta)
        self.executed.append((out, meta, report, free_after))
        return _kv_output(report)

    def _cache_json(self, result: EngineStepOutput) -> dict[str, Any]:
        """The applied output's prefix-cache counters; the connector's are read and
        restarted here, as vLLM's ``make_stats`` does."""
        stats = result.prefix_cache_stats
        keys = ("requests", "queries", "hits", "preempted_requests", "preempted_queries")
        keys += ("preempted_hits",)
        gpu = {k: int(getattr(stats, k, 0)) if stats else 0 for k in keys}
        cstats = self.sched.connector_prefix_cache_stats
        connector = [0, 0, 0]
        if cstats is not None:
            connector = [cstats.requests, cstats.queries, cstats.hits]
            self.sched.connector_prefix_cache_stats = type(cstats)()
        return {"gpu": gpu, "connector": connector}

    def has_work(self) -> bool:
        return self.queue.has_work() if self.queue is not None else self.sched.has_requests()

    def abort(self, rid: str) -> list[str]:
        ended = self.sched.finish_requests([rid], RequestStatus.FINISHED_ABORTED)
        return [r.request_id for r in ended]

    def common(self, line: dict[str, Any]) -> dict[str, Any]:
        sched = self.sched
        line.update(
            free_blocks=self.pool.get_num_free_blocks(),
            num_running=len(sched.running),
            num_waiting=len(sched.waiting) + len(sched.kv_holding_waiting),
            waiting_for_kv=sorted(
                r.request_id
                for r in sched.requests.values()
                if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS
            ),
            held=sorted(r.request_id for r in sched.requests.values() if r.is_finished()),
        )
        return line

    def _batch_fields(self) -> dict[str, Any]:
        executed, self.executed = self.executed, []
        if not executed:
            return {"scheduled": None}
        out, meta, report, free_after = executed[0]
        return {
            "scheduled": [{"id": rid, "n": n} for rid, n in out.num_scheduled_tokens.items()],
            "preempted": sorted(out.preempted_req_ids),
            "meta": meta,
            "report": report,
            "free_blocks_after_schedule": free_after,
        }

    def sync_step(self) -> dict[str, Any]:
        sched = self.sched
        out = sched.schedule()
        sampled = self._sample(sched, out)
        kvo = self._kv_worker(sched, out)
        result = sched.update_from_output(out, sampled, kvo)
        body = self._batch_fields()
        body["finished"], body["params"] = _outputs_json(result)
        body["cache"] = self._cache_json(result)
        return body

    def async_step(self) -> dict[str, Any]:
        assert self.queue is not None
        it = self.queue.step()
        body = self._batch_fields()
        body["applied_step"] = it.applied.step if it.applied is not None else None
        body["finished"], body["params"] = _outputs_json(it.output)
        body["cache"] = self._cache_json(it.output) if it.output is not None else None
        body["in_flight"] = self.queue.in_flight_steps()
        return body

    def run(self) -> list[dict[str, Any]]:
        lines: list[dict[str, Any]] = [
            {"type": "header", "vllm_version": "0.33.0", "max_model_len": self.max_model_len}
        ]
        feed = TraceFeed(
            self.trace, lambda spec, t: self.sched.add_request(self._request(spec, t)), self.abort
        )
        while True:
            step = self.step_index
            aborted = feed.at_step(step)
            if feed.drained and not self.has_work():
                break
            if step > 5000:
                raise RuntimeError("no end after 5000 steps")
            body = self.async_step() if self.queue is not None else self.sync_step()
            lines.append(self.common({"type": "step", "step": step, "aborted": aborted, **body}))
            self.step_index += 1
        lines.append(summary_line(self.step_index, self.pool.get_num_free_blocks()))
        return lines

    def _request(self, spec: dict[str, Any], arrival: float) -> Request:
        params = spec.get("kv_transfer_params")
        return Request(
            str(spec["request_id"]),
            list(spec["prompt_token_ids"]),
            int(spec["max_tokens"]),
            arrival_time=arrival,
            priority=int(spec.get("priority", 0)),
            block_hasher=self.hasher,
            kv_transfer_params=copy.deepcopy(params) if params is not None else None,
        )


def run_kvcore_or_error(cfg: dict[str, Any], trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kvcore's lines for a case, with a failure (an exception, no end) as one error line."""
    try:
        return KvcoreReplay(cfg, trace).run()
    except Exception as e:  # noqa: BLE001 - any failure is a mismatch to report
        return [{"type": "error", "error": f"{type(e).__name__}: {e}"}]


def run_oracle(
    vllm_python: str, cases: list[tuple[dict[str, Any], list[dict[str, Any]]]], timeout: float
) -> list[list[dict[str, Any]]]:
    """vLLM's lines for every case (one oracle process)."""
    with tempfile.TemporaryDirectory(prefix="kvsim-pd-") as tmp:
        work = Path(tmp)
        jobs = [
            {"config": c, "trace": t, "out": str(work / f"case{i}.jsonl")}
            for i, (c, t) in enumerate(cases)
        ]
        run_oracle_jobs(vllm_python, DRIVER, jobs, work, timeout, "P/D")
        return [read_jsonl(work / f"case{i}.jsonl") for i in range(len(cases))]
