"""What one ``Scheduler.schedule()`` call decides and what the model returns.

A slim mirror of ``SchedulerOutput`` (``vllm/v1/core/sched/output.py``) and of the
parts of ``EngineCoreOutputs`` that scheduling produces (vLLM 0.33.0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvcore.kv_cache_manager import KVCacheBlocks, PrefixCacheStats
from kvcore.kv_events import KVCacheEvent
from kvcore.request import Request
from kvcore.spec_decode import SpecDecodingStats


@dataclass(slots=True)
class SchedulerOutput:
    """Mirrors the scheduling part of ``vllm.v1.core.sched.output.SchedulerOutput``.

    One step's plan. Token counts are tokens scheduled in this step."""

    num_scheduled_tokens: dict[str, int]
    """Request id -> tokens scheduled, in scheduling order (running first)."""
    total_num_scheduled_tokens: int
    scheduled_new_reqs: list[str]
    """Requests scheduled for the first time (block table in ``req_to_new_blocks``)."""
    scheduled_resumed_reqs: list[str]
    """Previously preempted requests admitted again (whole block table)."""
    scheduled_running_reqs: list[str]
    req_to_new_blocks: dict[str, KVCacheBlocks]
    """New and resumed: the whole block table per group; running: only new blocks."""
    preempted_req_ids: set[str]
    finished_req_ids: set[str]
    """Requests that finished since the previous step."""
    kv_connector_metadata: object | None = None
    """What the KV connector asks of its workers in this step (with the offloading
    connector an ``OffloadingConnectorMetadata``); None without a connector."""
    scheduled_spec_decode_tokens: dict[str, list[int]] = field(default_factory=dict)
    """Request id -> the draft tokens scheduled for verification in this step (counted
    in ``num_scheduled_tokens``; ``-1`` for placeholders); empty without speculative
    decoding."""
    num_spec_tokens_to_schedule: int = 0
    """Drafts per request the next step may verify (vLLM: ``num_speculative_tokens``;
    the async scheduler's placeholder count)."""
    skip_drafts: bool = False
    """No request of this step can use the drafts proposed after it: the drafter's
    forward pass is skipped (vLLM's V2 model runner; drafters with lookahead slots)."""

    def get_new_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        """Block ids per group of ``req_to_new_blocks[request_id]``."""
        return self.req_to_new_blocks[request_id].get_block_ids()


@dataclass(slots=True)
class EngineStepOutput:
    """What ``update_from_output`` reports for one step."""

    finished_req_ids: list[str] = field(default_factory=list)
    """Requests that stopped in this step, in scheduling order."""
    finished_requests: list[Request] = field(default_factory=list)
    """The same requests (already released by the scheduler)."""
    new_token_ids: dict[str, list[int]] = field(default_factory=dict)
    prefix_cache_stats: PrefixCacheStats | None = None
    kv_events: list[KVCacheEvent] = field(default_factory=list)
    spec_decoding_stats: SpecDecodingStats | None = None
    """The step's drafts and accepted tokens (None: no drafts were verified)."""
    kv_transfer_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Request id -> the transfer parameters the KV connector returned when it
    finished (P/D: what the decode side needs to read its blocks)."""
