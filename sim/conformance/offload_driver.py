"""Oracle driver for the CPU KV offload tier: vLLM 0.33.0's real ``Scheduler`` with its
``OffloadingConnector`` (scheduler role), run on a CPU.

Executed by the oracle environment's interpreter (``.venv-vllm/bin/python``); kvsim
never imports it. Uses the standard library, vLLM, and sibling files loaded by path
(``oracle_load.py``): the oracle driver's ``oracle_config.py`` (model directory,
NONE_HASH), ``oracle_common.py`` (request set-up), ``oracle_scheduler.py`` (the
recording async scheduler, sampled tokens, a step's counters) and ``oracle_async.py``
(the held-output executor, the engine shell), ``offload_worker.py`` (the fake worker
both replays share), ``offload_case.py`` (a case's knobs and their defaults, also
kvsim's) and ``trace_feed.py`` (a trace's arrivals and aborts).

The engine is configured as ``--kv-offloading-size`` does it: ``CacheConfig.
kv_offloading_size`` (GiB) makes ``VllmConfig`` pick the ``OffloadingConnector``
with ``kv_role="kv_both"`` and ``cpu_bytes_to_use``; ``blocks_per_chunk`` and
``offload_prompt_only`` go in ``kv_connector_extra_config``. The KV specs are tiny
(one head of size 1), so one CPU chunk is one 4 KiB page and ``cpu_chunks`` pages
make a tier of ``cpu_chunks`` chunks. The worker side is ``FakeOffloadWorker``: its
reports reach ``update_from_output`` as the ``KVConnectorOutput`` of the model
output (``finished_recving`` and ``OffloadingWorkerMetadata.completed_jobs``).

Usage: ``offload_driver.py JOBS`` where JOBS is a JSON file holding
``[{"mode": "steps", "config", "trace", "out"} | {"mode": "capacity", "cases", "out"}]``;
each job writes JSON lines to its ``out``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import vllm
from oracle_load import load_by_path
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
    OffloadingWorkerMetadata,
)
from vllm.v1.core import kv_cache_utils
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

oracle_config = load_by_path("oracle_config.py")
oracle_common = load_by_path("oracle_common.py")
oracle_scheduler = load_by_path("oracle_scheduler.py")
oracle_async = load_by_path("oracle_async.py")
FakeOffloadWorker = load_by_path("offload_worker.py").FakeOffloadWorker
OFFLOAD_DEFAULTS = load_by_path("offload_case.py").DEFAULTS
TraceFeed = load_by_path("trace_feed.py").TraceFeed

PAGE = 4096


class SortedIterSet(set):
    """A set iterated in sorted order. vLLM's ``finished_req_ids`` is a set of str, so
    the order in which the connector visits finished requests (their stores, their
    LRU recency) follows string hashing, which differs from process to process; the
    driver fixes it to sorted order, which kvcore's connector uses."""

    def __iter__(self):  # type: ignore[override]
        return iter(sorted(set.__iter__(self)))


def build(cfg: dict[str, Any], max_model_len: int) -> Scheduler:
    model = oracle_config.tiny_model_config(max_model_len)
    sched = SchedulerConfig(
        max_num_seqs=int(cfg["max_num_seqs"]),
        max_num_batched_tokens=int(cfg["max_num_batched_tokens"]),
        max_model_len=max_model_len,
        enable_chunked_prefill=bool(cfg["enable_chunked_prefill"]),
        long_prefill_token_threshold=int(cfg["long_prefill_token_threshold"]),
        policy=cfg["policy"],
        watermark=float(cfg["watermark"]),
        scheduler_reserve_full_isl=bool(cfg["scheduler_reserve_full_isl"]),
        async_scheduling=bool(cfg["async_scheduling"]),
        is_encoder_decoder=False,
    )
    cache = CacheConfig(
        block_size=int(cfg["block_size"]),
        enable_prefix_caching=True,
        prefix_caching_hash_algo=cfg["prefix_caching_hash_algo"],
        kv_offloading_size=int(cfg["cpu_chunks"]) * PAGE / (1 << 30),
    )
    cache.num_gpu_blocks = int(cfg["num_gpu_blocks"])
    extra = {
        "blocks_per_chunk": int(cfg["blocks_per_chunk"]),
        "offload_prompt_only": bool(cfg["offload_prompt_only"]),
    }
    vllm_config = VllmConfig(
        model_config=model,
        scheduler_config=sched,
        cache_config=cache,
        device_config=DeviceConfig(device="cpu"),
        kv_transfer_config=KVTransferConfig(kv_connector_extra_config=extra),
    )
    ktc = vllm_config.kv_transfer_config
    assert ktc is not None and ktc.kv_connector == "OffloadingConnector", ktc
    assert ktc.kv_role == "kv_both"
    if bool(cfg["async_scheduling"]) != bool(vllm_config.scheduler_config.async_scheduling):
        raise ValueError("vLLM changed async scheduling for this configuration")
    register_all_kvcache_specs(vllm_config)
    steps_cfg = oracle_config.merged(
        oracle_config.STEPS_DEFAULTS, {"num_gpu_blocks": cfg["num_gpu_blocks"]}
    )
    steps_cfg.update(block_size=cfg["block_size"], kv_groups=cfg["kv_groups"])
    cls = oracle_scheduler.RecordingAsyncScheduler if cfg["async_scheduling"] else Scheduler
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=oracle_config.kv_cache_config_for(steps_cfg),
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=int(cfg["block_size"]),
        log_stats=True,
    )


def short_key(key: bytes) -> str:
    """First 6 bytes of the block hash, then the group index."""
    return key[:6].hex() + ":" + str(int.from_bytes(key[-4:], "big"))


def job_json(job_id: int, job: Any, keys: Any, is_store: bool) -> list[Any]:
    gpu = job.src_spec if is_store else job.dst_spec
    cpu = job.dst_spec if is_store else job.src_spec
    return [
        job_id,
        job.req_id,
        sorted(short_key(k) for k in keys),
        [int(b) for b in gpu.block_ids],
        [int(c) for c in cpu.block_ids],
    ]


def cpu_state(manager: Any) -> dict[str, Any]:
    return {
        "keys": sorted(short_key(k) for k in manager._policy.chunks),
        "evictable": manager._num_evictable_cache_chunks,
        "write_pending": manager._num_write_pending_chunks,
    }


def _header(manager: Any, max_model_len: int) -> dict[str, Any]:
    """A case's first line: the versions and sizes both sides must agree on."""
    return {
        "type": "header",
        "vllm_version": vllm.__version__,
        "num_cpu_chunks": manager._num_chunks,
        "max_model_len": max_model_len,
    }


def _feed(trace: list[dict[str, Any]], sched: Any, hasher: Any) -> Any:
    """The trace's arrivals and aborts for vLLM's scheduler ``sched``."""

    def add(spec: dict[str, Any], arrival: float) -> None:
        sched.add_request(
            oracle_common.make_request(spec, arrival, hasher, int(spec["max_tokens"]))
        )

    def abort(rid: str) -> list[str]:
        return [r.request_id for r in sched.finish_requests([rid], RequestStatus.FINISHED_ABORTED)]

    return TraceFeed(trace, add, abort)


def run_steps(cfg_in: dict[str, Any], trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cfg = oracle_config.merged(OFFLOAD_DEFAULTS, cfg_in)
    max_model_len = oracle_config.resolve_max_model_len(cfg, trace)
    hash_fn, _ = oracle_config.init_none_hash(
        cfg["prefix_caching_hash_algo"], cfg["none_hash_seed"]
    )
    hasher = kv_cache_utils.get_request_block_hasher(int(cfg["block_size"]), hash_fn)
    sched = build(cfg, max_model_len)
    conn = sched.connector.scheduler
    manager = conn.manager
    worker = FakeOffloadWorker(int(cfg["load_latency"]), int(cfg["store_latency"]))
    pool = sched.kv_cache_manager.block_pool
    sched.finished_req_ids = SortedIterSet()
    lines: list[dict[str, Any]] = [_header(manager, max_model_len)]
    feed = _feed(trace, sched, hasher)
    step = 0
    token = int(cfg["sample_token_id"])
    while True:
        aborted = feed.at_step(step)
        if feed.drained and not sched.has_requests():
            break
        if step > 20000:
            raise RuntimeError("no end after 20000 steps")
        out = sched.schedule()
        sched.finished_req_ids = SortedIterSet()
        free_after_schedule = pool.get_num_free_blocks()
        meta = out.kv_connector_metadata
        loads = [
            job_json(j, job, conn._jobs[j].keys, False) for j, job in sorted(meta.load_jobs.items())
        ]
        stores = [
            job_json(j, job, conn._jobs[j].keys, True) for j, job in sorted(meta.store_jobs.items())
        ]
        flush = sorted(meta.jobs_to_flush or ())
        worker.submit(
            step,
            {j: job.req_id for j, job in meta.load_jobs.items()},
            list(meta.store_jobs),
            flush,
        )
        completed, recving = worker.finished(step)
        req_ids = list(out.num_scheduled_tokens)
        sampled = []
        for rid in req_ids:
            req = sched.requests[rid]
            sampled.append([token] if req.num_computed_tokens >= req.num_tokens else [])
        mro = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=sampled,
            kv_connector_output=KVConnectorOutput(
                finished_recving=recving,  # a list: vLLM iterates it; keeps the order fixed
                kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=completed),
            ),
        )
        engine_outputs = sched.update_from_output(out, mro)
        num_running, num_waiting = sched.get_request_counts()
        stats = None
        for eco in engine_outputs.values():
            if eco.scheduler_stats is not None:
                stats = eco.scheduler_stats
        line = {
            "type": "step",
            "step": step,
            "scheduled": [{"id": rid, "n": n} for rid, n in out.num_scheduled_tokens.items()],
            "preempted": sorted(out.preempted_req_ids or ()),
            "finished": oracle_scheduler.finished_ids(engine_outputs),
            "aborted": aborted,
            "free_blocks_after_schedule": free_after_schedule,
            "free_blocks": pool.get_num_free_blocks(),
            "num_running": num_running,
            "num_waiting": num_waiting,
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
            "cpu": cpu_state(manager),
            "prefix_cache": oracle_scheduler.prefix_stats_json(engine_outputs),
            "connector_cache": _connector_stats(stats),
        }
        lines.append(line)
        step += 1
    lines.append({"type": "summary", "steps": step, "free_blocks_end": pool.get_num_free_blocks()})
    return lines


class OffloadExecutor(oracle_async.HeldOutputExecutor):
    """The fake model executor of the async replay: at ``execute_model`` (right after
    ``schedule()``) it hands the batch's metadata to the fake worker and fixes the
    batch's output (sampled tokens and the worker's report); ``sample_tokens``
    returns it."""

    def __init__(self, sched: Any, worker: Any, token: int) -> None:
        self.sched = sched
        self.conn = sched.connector.scheduler
        self.worker = worker
        self.token = token
        self.step_index = 0
        self.executed: list[tuple[Any, dict[str, Any]]] = []

    def execute_model(self, scheduler_output: Any, non_block: bool = False) -> Any:
        out = scheduler_output
        conn = self.conn
        meta = out.kv_connector_metadata
        free_after = self.sched.kv_cache_manager.block_pool.get_num_free_blocks()
        flush = sorted(meta.jobs_to_flush or ())
        fields = {
            "scheduled": [{"id": rid, "n": n} for rid, n in out.num_scheduled_tokens.items()],
            "preempted": sorted(out.preempted_req_ids or ()),
            "free_blocks_after_schedule": free_after,
            "loads": [
                job_json(j, job, conn._jobs[j].keys, False)
                for j, job in sorted(meta.load_jobs.items())
            ],
            "stores": [
                job_json(j, job, conn._jobs[j].keys, True)
                for j, job in sorted(meta.store_jobs.items())
            ],
            "flush": flush,
        }
        step = self.step_index
        self.worker.submit(
            step, {j: job.req_id for j, job in meta.load_jobs.items()}, list(meta.store_jobs), flush
        )
        completed, recving = self.worker.finished(step)
        fields.update(completed=sorted(completed), recving=recving)
        req_ids = list(out.num_scheduled_tokens)
        output = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=oracle_scheduler.sampled_tokens(self.sched, out, self.token),
            kv_connector_output=KVConnectorOutput(
                finished_recving=recving,
                kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=completed),
            ),
        )
        self.executed.append((out, fields))
        return self._hold(out, output, output)


def run_steps_async(cfg_in: dict[str, Any], trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`run_steps` with vLLM's async engine loop (``AsyncScheduler`` behind the
    engine core's ``step_with_batch_queue``): one line per engine iteration."""
    cfg = oracle_config.merged(OFFLOAD_DEFAULTS, cfg_in)
    max_model_len = oracle_config.resolve_max_model_len(cfg, trace)
    hash_fn, _ = oracle_config.init_none_hash(
        cfg["prefix_caching_hash_algo"], cfg["none_hash_seed"]
    )
    hasher = kv_cache_utils.get_request_block_hasher(int(cfg["block_size"]), hash_fn)
    sched = build(cfg, max_model_len)
    manager = sched.connector.scheduler.manager
    worker = FakeOffloadWorker(int(cfg["load_latency"]), int(cfg["store_latency"]))
    executor = OffloadExecutor(sched, worker, int(cfg["sample_token_id"]))
    engine = oracle_async.EngineShell(sched, executor)
    pool = sched.kv_cache_manager.block_pool
    sched.finished_req_ids = SortedIterSet()
    lines: list[dict[str, Any]] = [_header(manager, max_model_len)]
    feed = _feed(trace, sched, hasher)
    batch_steps: dict[int, int] = {}  # id(scheduler output) -> engine iteration
    step = 0
    while True:
        aborted = feed.at_step(step)
        if feed.drained and not engine.has_work():
            break
        if step > 20000:
            raise RuntimeError("no end after 20000 steps")
        executor.step_index = step
        engine_outputs, _ = engine.step_with_batch_queue()
        sched.finished_req_ids = SortedIterSet(sched.finished_req_ids)
        executed, executor.executed = executor.executed, []
        line: dict[str, Any] = {"type": "step", "step": step, "aborted": aborted}
        if executed:
            out, fields = executed[0]
            batch_steps[id(out)] = step
            line.update(fields)
        else:
            line["scheduled"] = None
        applied, sched.applied = sched.applied, []
        line["applied_step"] = batch_steps.pop(id(applied[0])) if applied else None
        if applied:
            outputs = engine_outputs or {}
            stats = None
            for eco in outputs.values():
                if eco.scheduler_stats is not None:
                    stats = eco.scheduler_stats
            line.update(
                finished=oracle_scheduler.finished_ids(outputs),
                prefix_cache=oracle_scheduler.prefix_stats_json(outputs),
                connector_cache=_connector_stats(stats),
            )
        else:
            line.update(finished=[], prefix_cache=None, connector_cache=None)
        num_running, num_waiting = sched.get_request_counts()
        line.update(
            free_blocks=pool.get_num_free_blocks(),
            num_running=num_running,
            num_waiting=num_waiting,
            waiting_for_kv=sorted(
                r.request_id
                for r in sched.requests.values()
                if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS
            ),
            cpu=cpu_state(manager),
            in_flight=[batch_steps[id(b[1])] for b in reversed(engine.batch_queue)],
        )
        lines.append(line)
        step += 1
    lines.append({"type": "summary", "steps": step, "free_blocks_end": pool.get_num_free_blocks()})
    return lines


def _connector_stats(stats: Any) -> list[int]:
    cps = getattr(stats, "connector_prefix_cache_stats", None) if stats is not None else None
    if cps is None:
        return [0, 0, 0]
    return [int(cps.requests), int(cps.queries), int(cps.hits)]


def run_capacity(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM's own chunk count for (cpu_bytes, worker_kv_bytes_per_block,
    blocks_per_chunk, world_size) cases, from ``CPUOffloadingSpec``."""
    from vllm.v1.kv_offload.config import (
        OffloadingCacheConfig,
        OffloadingConfig,
        OffloadingGroupConfig,
        OffloadingModelConfig,
        OffloadingParallelConfig,
    )
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

    out = []
    for case in cases:
        config = OffloadingConfig(
            groups=(OffloadingGroupConfig(16, ("layer0",), 0),),
            worker_kv_bytes_per_block=int(case["worker_kv_bytes_per_block"]),
            enable_kv_cache_events=False,
            extra_config={"cpu_bytes_to_use": case["cpu_bytes_to_use"]},
            engine_id="e",
            model=OffloadingModelConfig("m", "bfloat16", 4096),
            cache=OffloadingCacheConfig(16, int(case["blocks_per_chunk"])),
            parallel=OffloadingParallelConfig(
                0, int(case["world_size"]), int(case["world_size"]), 1, 1, 1, 0, 1, None, False
            ),
        )
        spec = CPUOffloadingSpec(config)
        out.append(dict(case, num_chunks=spec.num_chunks))
    return out


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        jobs = json.load(f)
    for job in jobs:
        if job["mode"] == "capacity":
            lines = run_capacity(job["cases"])
        else:
            try:
                replay = run_steps_async if job["config"].get("async_scheduling") else run_steps
                lines = replay(job["config"], job["trace"])
            except Exception as e:  # noqa: BLE001 - reported as a mismatch
                lines = [{"type": "error", "error": f"{type(e).__name__}: {e}"}]
        with open(job["out"], "w") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
