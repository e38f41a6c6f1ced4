"""What one ``Scheduler.schedule()`` call decides and what the model returns.

A slim mirror of ``SchedulerOutput`` (``vllm/v1/core/sched/output.py``) and of the
parts of ``EngineCoreOutputs`` that scheduling produces (vLLM 0.33.0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvcore.kv_cache_manager import KVCacheBlocks, PrefixCacheStats
from kvcore.kv_events import KVCacheEvent
from kvcore.request import Request
from kvcore.spec_decode import SpecDecodingStats


@dataclass(slots=True, init=False)
class SchedulerOutput:
    """Mirrors the scheduling part of ``vllm.v1.core.sched.output.SchedulerOutput``.

    One step's plan. Token counts are tokens scheduled in this step.

    Its ``__init__`` is written out (``init=False``): compiled, a dataclass's generated
    ``__init__`` is interpreted code, and one of these is made per engine step."""

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
    kv_connector_metadata: object | None
    """What the KV connector asks of its workers in this step (with the offloading
    connector an ``OffloadingConnectorMetadata``); None without a connector."""
    scheduled_spec_decode_tokens: dict[str, list[int]]
    """Request id -> the draft tokens scheduled for verification in this step (counted
    in ``num_scheduled_tokens``; ``-1`` for placeholders); empty without speculative
    decoding."""
    num_spec_tokens_to_schedule: int
    """Drafts per request the next step may verify (vLLM: ``num_speculative_tokens``;
    the async scheduler's placeholder count)."""
    skip_drafts: bool
    """No request of this step can use the drafts proposed after it: the drafter's
    forward pass is skipped (vLLM's V2 model runner; drafters with lookahead slots)."""

    def __init__(
        self,
        num_scheduled_tokens: dict[str, int],
        total_num_scheduled_tokens: int,
        scheduled_new_reqs: list[str],
        scheduled_resumed_reqs: list[str],
        scheduled_running_reqs: list[str],
        req_to_new_blocks: dict[str, KVCacheBlocks],
        preempted_req_ids: set[str],
        finished_req_ids: set[str],
        kv_connector_metadata: object | None = None,
        scheduled_spec_decode_tokens: dict[str, list[int]] | None = None,
        num_spec_tokens_to_schedule: int = 0,
        skip_drafts: bool = False,
    ) -> None:
        self.num_scheduled_tokens = num_scheduled_tokens
        self.total_num_scheduled_tokens = total_num_scheduled_tokens
        self.scheduled_new_reqs = scheduled_new_reqs
        self.scheduled_resumed_reqs = scheduled_resumed_reqs
        self.scheduled_running_reqs = scheduled_running_reqs
        self.req_to_new_blocks = req_to_new_blocks
        self.preempted_req_ids = preempted_req_ids
        self.finished_req_ids = finished_req_ids
        self.kv_connector_metadata = kv_connector_metadata
        self.scheduled_spec_decode_tokens = (
            {} if scheduled_spec_decode_tokens is None else scheduled_spec_decode_tokens
        )
        self.num_spec_tokens_to_schedule = num_spec_tokens_to_schedule
        self.skip_drafts = skip_drafts

    def get_new_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        """Block ids per group of ``req_to_new_blocks[request_id]``."""
        return self.req_to_new_blocks[request_id].get_block_ids()


@dataclass(slots=True, init=False)
class EngineStepOutput:
    """What ``update_from_output`` reports for one step (its ``__init__`` written out,
    as :class:`SchedulerOutput`'s)."""

    finished_req_ids: list[str]
    """Requests that stopped in this step, in scheduling order."""
    finished_requests: list[Request]
    """The same requests (already released by the scheduler)."""
    new_token_ids: dict[str, list[int]]
    prefix_cache_stats: PrefixCacheStats | None
    kv_events: list[KVCacheEvent]
    spec_decoding_stats: SpecDecodingStats | None
    """The step's drafts and accepted tokens (None: no drafts were verified)."""
    kv_transfer_params: dict[str, dict[str, Any]]
    """Request id -> the transfer parameters the KV connector returned when it
    finished (P/D: what the decode side needs to read its blocks)."""

    def __init__(
        self,
        finished_req_ids: list[str] | None = None,
        finished_requests: list[Request] | None = None,
        new_token_ids: dict[str, list[int]] | None = None,
        prefix_cache_stats: PrefixCacheStats | None = None,
        kv_events: list[KVCacheEvent] | None = None,
        spec_decoding_stats: SpecDecodingStats | None = None,
        kv_transfer_params: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.finished_req_ids = [] if finished_req_ids is None else finished_req_ids
        self.finished_requests = [] if finished_requests is None else finished_requests
        self.new_token_ids = {} if new_token_ids is None else new_token_ids
        self.prefix_cache_stats = prefix_cache_stats
        self.kv_events = [] if kv_events is None else kv_events
        self.spec_decoding_stats = spec_decoding_stats
        self.kv_transfer_params = {} if kv_transfer_params is None else kv_transfer_params
