"""vLLM's scheduler as the oracle builds it, and what a step makes of it: the fake
model's sampled tokens and drafts (by kvcore's rules in ``kvcore/replay_spec.py``), the
blocks a scheduler output hands out, and the counters of the engine-core outputs.

Part of the oracle driver (``vllm_driver.py``); the steps replays
(``oracle_steps.py``, ``oracle_async.py``), ``pd_driver.py`` and ``offload_driver.py``
build on it. Standard library and vLLM only.
"""

from __future__ import annotations

import os
from typing import Any

from oracle_load import load_by_path
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.structured_output import StructuredOutputManager

oracle_config = load_by_path("oracle_config.py")

replay_spec = load_by_path(os.pardir, os.pardir, "kvcore", "replay_spec.py")
"""kvcore's fake drafter rules."""


class _EventSink:
    """Stands in for vLLM's event publisher and keeps the events of one step."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def publish(self, batch: Any) -> None:
        """Collect a KVEventBatch."""
        self.events.extend(batch.events)

    def take(self) -> list[Any]:
        """Return and clear the collected events."""
        out, self.events = self.events, []
        return out

    def shutdown(self) -> None:
        """Nothing to release."""


class RecordingAsyncScheduler(AsyncScheduler):
    """vLLM's AsyncScheduler, noting which scheduler outputs it plans and applies."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.applied: list[Any] = []

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        """Record the batch whose output is applied, then apply it."""
        self.applied.append(scheduler_output)
        return super().update_from_output(scheduler_output, model_runner_output)


def new_scheduler(
    vllm_config: Any, kv_cache_config: Any, block_size: int, async_scheduling: bool
) -> Scheduler:
    """vLLM's Scheduler over ``kv_cache_config`` (a :class:`RecordingAsyncScheduler`
    with ``async_scheduling``), logging stats, as every mode's replay builds it."""
    cls = RecordingAsyncScheduler if async_scheduling else Scheduler
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=block_size,
        log_stats=True,
    )


def build_scheduler(cfg: dict[str, Any], max_model_len: int) -> tuple[Scheduler, _EventSink]:
    """Build vLLM's Scheduler from the knobs; returns it with its event sink."""
    vllm_config = oracle_config.build_vllm_config(cfg, max_model_len)
    register_all_kvcache_specs(vllm_config)
    if cfg["async_scheduling"] and vllm_config.scheduler_config.async_scheduling is not True:
        raise ValueError("vLLM turned async scheduling off for this configuration")
    sched = new_scheduler(
        vllm_config,
        oracle_config.kv_cache_config_for(cfg),
        int(cfg["block_size"]),
        bool(cfg["async_scheduling"]),
    )
    sched.use_v2_model_runner = bool(cfg["use_v2_model_runner"])
    sink = _EventSink()
    sched.kv_event_publisher = sink
    return sched, sink


def header_config(sched: Scheduler, cfg: dict[str, Any], max_model_len: int) -> dict[str, Any]:
    """The header's config block, in the samples' key order."""
    sc = sched.scheduler_config
    coordinator = sched.kv_cache_manager.coordinator
    return {
        "block_size": int(cfg["block_size"]),
        "num_gpu_blocks": int(cfg["num_gpu_blocks"]),
        "enable_prefix_caching": bool(sched.cache_config.enable_prefix_caching),
        "prefix_caching_hash_algo": sched.cache_config.prefix_caching_hash_algo,
        "max_num_seqs": sc.max_num_seqs,
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "max_num_scheduled_tokens": sched.max_num_scheduled_tokens,
        "enable_chunked_prefill": sc.enable_chunked_prefill,
        "long_prefill_token_threshold": sc.long_prefill_token_threshold,
        "policy": str(sc.policy),
        "watermark": sc.watermark,
        "scheduler_reserve_full_isl": sched.scheduler_reserve_full_isl,
        "max_model_len": max_model_len,
        "use_v2_model_runner": bool(sched.use_v2_model_runner),
        "coordinator": type(coordinator).__name__,
        "managers": [type(m).__name__ for m in coordinator.single_type_managers],
    }


def sampled_tokens(sched: Scheduler, out: Any, token: int) -> list[list[int]]:
    """Right after ``schedule()``: `token` for each scheduled request whose prefill is
    now complete, ``1 + accepted`` times for one that verifies drafts."""
    spec = out.scheduled_spec_decode_tokens
    sampled = []
    for rid in out.num_scheduled_tokens:
        req = sched.requests[rid]
        if req.is_prefill_chunk:
            sampled.append([])
            continue
        drafts = spec.get(rid)
        n = 1 + replay_spec.num_accepted(rid, req.num_tokens, len(drafts)) if drafts else 1
        sampled.append([token] * n)
    return sampled


def propose_drafts(sched: Scheduler, out: Any, token: int) -> None:
    """After a synchronous step that ran: the fake drafter's proposals, handed over as
    ``EngineCore.post_step`` hands the model runner's."""
    k = sched.num_spec_tokens
    if not k or not out.total_num_scheduled_tokens or out.skip_drafts:
        return
    req_ids, drafts = [], []
    for rid in out.num_scheduled_tokens:
        req = sched.requests.get(rid)
        if req is not None and not req.is_finished():
            req_ids.append(rid)
            drafts.append([token] * replay_spec.num_drafts(rid, req.num_tokens, k))
    sched.update_draft_token_ids(DraftTokenIds(req_ids, drafts))


def spec_stats_json(engine_outputs: dict[int, Any]) -> dict[str, Any] | None:
    """The step's speculative-decoding counters (None: no drafts verified)."""
    stats = None
    for eco in engine_outputs.values():
        if eco.scheduler_stats is not None:
            stats = eco.scheduler_stats.spec_decoding_stats
    return replay_spec.spec_stats_json(stats)


def fake_model_output(sched: Scheduler, out: Any, token: int) -> ModelRunnerOutput:
    """The model output of a synchronous step (see :func:`sampled_tokens`)."""
    req_ids = list(out.num_scheduled_tokens)
    sampled = sampled_tokens(sched, out, token)
    return ModelRunnerOutput(
        req_ids=req_ids,
        req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
        sampled_token_ids=sampled,
    )


def new_blocks_by_request(out: Any) -> dict[str, list[list[int]]]:
    """Block ids that the scheduler output reports for each scheduled request."""
    blocks: dict[str, list[list[int]]] = {}
    for data in out.scheduled_new_reqs:
        blocks[data.req_id] = [list(g) for g in data.block_ids]
    cached = out.scheduled_cached_reqs
    for rid, ids in zip(cached.req_ids, cached.new_block_ids):
        blocks[rid] = [] if ids is None else [list(g) for g in ids]
    return blocks


def prefix_stats_json(engine_outputs: dict[int, Any]) -> dict[str, int]:
    """Per-step prefix-cache counters from the EngineCoreOutputs' scheduler stats."""
    keys = ("requests", "queries", "hits", "preempted_requests", "preempted_queries")
    keys += ("preempted_hits",)
    stats = None
    for eco in engine_outputs.values():
        if eco.scheduler_stats is not None:
            stats = eco.scheduler_stats.prefix_cache_stats
    return {k: int(getattr(stats, k, 0)) if stats else 0 for k in keys}


def finished_ids(engine_outputs: dict[int, Any]) -> list[str]:
    """Ids of requests that finished in this step, in output order."""
    return [
        o.request_id
        for eco in engine_outputs.values()
        for o in eco.outputs
        if o.finish_reason is not None
    ]
