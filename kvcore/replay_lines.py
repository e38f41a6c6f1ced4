"""The JSON lines of a trace replay (:mod:`kvcore.replay`): the header, the entries of
a step's scheduled requests, its prefix-cache counters. The schema is that of kvsim's
vLLM oracle, so the two sides compare line by line.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from kvcore import VLLM_VERSION, __version__
from kvcore.async_scheduler import BATCH_QUEUE_SIZE
from kvcore.block_hashing import BlockHasher
from kvcore.replay_config import ReplayConfig
from kvcore.request import Request
from kvcore.sched_output import EngineStepOutput, SchedulerOutput
from kvcore.scheduler import Scheduler

PREFIX_CACHE_FIELDS = (
    "requests",
    "queries",
    "hits",
    "preempted_requests",
    "preempted_queries",
    "preempted_hits",
)
"""The prefix-cache counters of a step line, in their order."""


def header_line(
    config: ReplayConfig,
    scheduler: Scheduler,
    trace_name: str,
    num_requests: int,
    max_model_len: int,
    hasher: BlockHasher,
) -> dict[str, Any]:
    """The replay's first line: versions, the trace, the config as replayed."""
    cfg = asdict(config)
    cfg.pop("none_hash_seed")
    cfg.update(
        batch_queue_size=BATCH_QUEUE_SIZE if config.async_scheduling else 1,
        max_model_len=max_model_len,
        kv_groups=list(config.kv_groups),
        max_num_scheduled_tokens=config.max_num_batched_tokens,
        coordinator=type(scheduler.kv_cache_manager.coordinator).__name__,
        managers=[
            type(m).__name__ for m in scheduler.kv_cache_manager.coordinator.single_type_managers
        ],
    )
    return {
        "type": "header",
        "kvsim_version": __version__,
        "vllm_version": VLLM_VERSION,
        "trace": trace_name,
        "num_requests": num_requests,
        "sample_token_id": config.sample_token_id,
        "config": cfg,
        "none_hash_seed": config.none_hash_seed,
        "none_hash": hasher.none_hash.hex(),
    }


def scheduled_entries(
    out: SchedulerOutput, reqs: dict[str, Request], sampled: Any
) -> list[tuple[dict[str, Any], Request]]:
    """One entry per scheduled request (before its output): kind, tokens, new blocks."""
    new_ids = set(out.scheduled_new_reqs)
    resumed_ids = set(out.scheduled_resumed_reqs)
    entries = []
    for rid, n in out.num_scheduled_tokens.items():
        block_ids = out.get_new_block_ids(rid)
        if rid in resumed_ids:
            kind = "resumed"
        elif rid in new_ids:
            kind = "new"
        else:
            kind = "running"
            if not any(block_ids):
                block_ids = ()
        entry = {
            "id": rid,
            "kind": kind,
            "n": n,
            "new_block_ids": [list(b) for b in block_ids],
            "sampled": bool(sampled.get(rid)),
        }
        if out.num_spec_tokens_to_schedule:
            entry["spec"] = len(out.scheduled_spec_decode_tokens.get(rid, ()))
        entries.append((entry, reqs[rid]))
    return entries


def prefix_cache_json(result: EngineStepOutput) -> dict[str, int] | None:
    """The applied output's prefix-cache counters, or None when it has none."""
    stats = result.prefix_cache_stats
    if stats is None:
        return None
    return {k: getattr(stats, k) for k in PREFIX_CACHE_FIELDS}


def finish_entries(
    entries: list[tuple[dict[str, Any], Request]],
    scheduler: Scheduler,
    config: ReplayConfig,
    placeholders: bool,
) -> list[dict[str, Any]]:
    """The scheduled entries after the step's output: progress (and, in the async
    loop, ``placeholders``) of each request still in the scheduler; finished ones are
    gone from it and keep their entry as scheduled."""
    scheduled = []
    for entry, req in entries:
        if not req.is_finished():
            entry["computed_after"] = req.num_computed_tokens
            entry["num_tokens"] = req.num_tokens
            if placeholders:
                entry["placeholders"] = req.num_output_placeholders
            if config.dump_block_tables:
                entry["block_table"] = [
                    list(b) for b in scheduler.kv_cache_manager.get_block_ids(req.request_id)
                ]
        scheduled.append(entry)
    return scheduled
