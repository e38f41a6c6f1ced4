"""kvcore's scheduler for a connector case (the CPU offload tier's, P/D's), from the
case's knobs: what :mod:`sim.conformance.offload_kvcore` and :mod:`sim.conformance.pd`
build alike around their own connector.
"""

from __future__ import annotations

from typing import Any

from kvcore.async_scheduler import AsyncScheduler
from kvcore.kv_cache_interface import KVCacheConfig
from kvcore.scheduler import Scheduler
from kvcore.scheduler_config import SchedulerConfig


def connector_scheduler(
    cfg: dict[str, Any],
    max_model_len: int,
    kv_config: KVCacheConfig,
    connector: Any,
    watermark: float | None = None,
) -> Scheduler:
    """A :class:`~kvcore.scheduler.Scheduler` (an ``AsyncScheduler`` with
    ``async_scheduling``) with ``connector``, the case's scheduler knobs and
    ``max_model_len`` (tokens); ``watermark`` when the case sets one."""
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
    if watermark is None:
        return cls(sched_config, kv_config, connector=connector)
    return cls(sched_config, kv_config, watermark=watermark, connector=connector)
