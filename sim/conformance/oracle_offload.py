"""vLLM's side of a CPU-offload case: the scheduler with its ``OffloadingConnector``
built from a case's knobs, what the step lines read off vLLM's objects (jobs, CPU
tier, counters), the fake model output, and vLLM's own CPU chunk count.

Part of the offload oracle driver (``offload_driver.py``), which loads it by path;
standard library, vLLM and siblings loaded by path only. The line fields themselves
are ``offload_lines.py``'s, shared with kvcore's replay.
"""

from __future__ import annotations

from typing import Any

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
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

oracle_config = load_by_path("oracle_config.py")
oracle_scheduler = load_by_path("oracle_scheduler.py")
offload_lines = load_by_path("offload_lines.py")

PAGE = 4096
"""Bytes of one CPU chunk with the case's tiny KV specs (one 4 KiB page)."""


def build(cfg: dict[str, Any], max_model_len: int) -> Scheduler:
    """vLLM's scheduler for a case, configured as ``--kv-offloading-size`` does it (a
    tier of ``cfg["cpu_chunks"]`` pages); a ``RecordingAsyncScheduler`` with
    ``async_scheduling``."""
    vllm_config = _vllm_config(cfg, max_model_len)
    register_all_kvcache_specs(vllm_config)
    steps_cfg = oracle_config.merged(
        oracle_config.STEPS_DEFAULTS, {"num_gpu_blocks": cfg["num_gpu_blocks"]}
    )
    steps_cfg.update(block_size=cfg["block_size"], kv_groups=cfg["kv_groups"])
    return oracle_scheduler.new_scheduler(
        vllm_config,
        oracle_config.kv_cache_config_for(steps_cfg),
        int(cfg["block_size"]),
        bool(cfg["async_scheduling"]),
    )


def _vllm_config(cfg: dict[str, Any], max_model_len: int) -> VllmConfig:
    """The engine configuration of a case; checks that vLLM picked the offloading
    connector and kept the case's async scheduling."""
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
    return vllm_config


def _job_line(job_id: int, job: Any, keys: Any, is_store: bool) -> list[Any]:
    """One job as ``offload_lines.job_line``: the GPU side is a load's destination and
    a store's source."""
    gpu = job.src_spec if is_store else job.dst_spec
    cpu = job.dst_spec if is_store else job.src_spec
    return offload_lines.job_line(
        job_id,
        job.req_id,
        keys,
        [int(b) for b in gpu.block_ids],
        [int(c) for c in cpu.block_ids],
    )


def jobs_json(conn: Any, meta: Any) -> tuple[list[Any], list[Any]]:
    """The batch's load jobs and store jobs (by id), with their offload keys from the
    connector ``conn``."""
    loads = [
        _job_line(j, job, conn._jobs[j].keys, False) for j, job in sorted(meta.load_jobs.items())
    ]
    stores = [
        _job_line(j, job, conn._jobs[j].keys, True) for j, job in sorted(meta.store_jobs.items())
    ]
    return loads, stores


def cpu_state(manager: Any) -> dict[str, Any]:
    """The CPU manager's state as ``offload_lines.cpu_line``."""
    return offload_lines.cpu_line(
        manager._policy.chunks,
        manager._num_evictable_cache_chunks,
        manager._num_write_pending_chunks,
    )


def applied_json(engine_outputs: dict[int, Any] | None) -> dict[str, Any]:
    """An applied output's fields (``offload_lines.applied_fields``) from the engine
    outputs: finishes, GPU prefix-cache counters, and the connector's counters of the
    last scheduler stats."""
    outputs = engine_outputs or {}
    stats = None
    for eco in outputs.values():
        if eco.scheduler_stats is not None:
            stats = eco.scheduler_stats
    cps = getattr(stats, "connector_prefix_cache_stats", None) if stats is not None else None
    return offload_lines.applied_fields(
        oracle_scheduler.finished_ids(outputs),
        oracle_scheduler.prefix_stats_json(outputs),
        offload_lines.connector_counts(cps),
    )


def model_output(req_ids: list[str], sampled: list[list[int]], report: Any) -> ModelRunnerOutput:
    """The fake model's output of a batch: its sampled tokens, and the worker's report
    (``offload_lines.WorkerReport``) as the connector output."""
    return ModelRunnerOutput(
        req_ids=req_ids,
        req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
        sampled_token_ids=sampled,
        kv_connector_output=KVConnectorOutput(
            finished_recving=report.recving,  # a list: vLLM iterates it; keeps the order fixed
            kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=report.completed),
        ),
    )


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
