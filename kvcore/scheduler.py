"""The V1 scheduler, without encoders; drafts of speculative decoding (optional); KV
connectors: the CPU offload tier's and the P/D (NIXL) one's scheduler sides
(optional, off by default).

Mirrors ``Scheduler.schedule``, ``_preempt_request``, ``_update_after_schedule``,
``update_from_output``, ``finish_requests`` and ``_free_request`` of
``vllm/v1/core/sched/scheduler.py`` (vLLM 0.33.0). With a connector
(:class:`kvcore.offloading_connector.OffloadingConnectorScheduler`) it also mirrors
vLLM's connector hooks where vLLM places them: ``get_num_new_matched_tokens`` after
the prefix-cache lookup of a waiting request, ``update_state_after_alloc`` after its
allocation, ``WAITING_FOR_REMOTE_KVS`` and the ``kv_holding_waiting`` queue for
asynchronous loads (``_handle_blocked_waiting_request``,
``_update_waiting_for_remote_kv``, ``_inflight_prefill_reserved_blocks``),
``build_connector_meta`` at the end of ``schedule()``, ``request_finished`` in
``_free_request`` and the worker's report in ``_update_from_kv_xfer_finished``.
With the P/D connector (:class:`kvcore.nixl_connector.NixlConnectorScheduler`) also:
blocks kept after a request finished until the workers report ``finished_sending``;
the transfer parameters ``request_finished`` returns (``EngineStepOutput.
kv_transfer_params``); failed loads (``_handle_failed_recving``,
``_handle_invalid_blocks``, ``_update_requests_with_invalid_blocks``, by
``kv_load_failure_policy``); and with async scheduling the dropped output of a
preempted request on a KV producer (``drop_stale_output``) and the deferred block
frees of a KV consumer (``_request_blocks_can_be_freed``, ``_free_request_blocks``,
``_drain_deferred_frees``).

With a :class:`kvcore.spec_decode.SpeculativeConfig` it mirrors vLLM's handling of
draft tokens: a running request's drafts (``spec_token_ids``, set by
``update_draft_token_ids`` after a synchronous step, or placeholders under async
scheduling) are scheduled with its next token, within the token budget and the input
budget less each request's drafting slots (``draft_slots``); a waiting request with
one token to compute is padded to ``1 + k`` tokens (``pad_spec_decode``); the
output's ``scheduled_spec_decode_tokens`` lists the drafts per request; rejected
drafts roll back ``num_computed_tokens`` (and placeholders) in
``update_from_output``, which reports the step's ``SpecDecodingStats``; the output's
``skip_drafts`` says when no request can use the drafts proposed after the step
(``_drafts_unused``).

There is no model and no clock: the caller hands sampled tokens to
``update_from_output`` and arrival times come with each ``Request``.

As in vLLM, this class also holds the parts of asynchronous scheduling that live in
vLLM's base ``Scheduler``: the checks on output placeholders (tokens in flight) and
on stale output of preempted requests. They change nothing here: only
:class:`kvcore.async_scheduler.AsyncScheduler` creates placeholders, and only a step
whose output is applied after the next ``schedule()`` leaves stale output.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kvcore.kv_cache_block import KVCacheBlock
from kvcore.kv_cache_interface import KVCacheConfig
from kvcore.kv_cache_manager import KVCacheBlocks, KVCacheManager, PrefixCacheStats
from kvcore.kv_connector_output import KVConnectorOutput
from kvcore.nixl_connector import NixlConnectorScheduler
from kvcore.offloading_connector import OffloadingConnectorScheduler
from kvcore.request import Request, RequestStatus, check_stop
from kvcore.request_queue import FCFSRequestQueue, PriorityRequestQueue, create_request_queue
from kvcore.sched_output import EngineStepOutput, SchedulerOutput
from kvcore.scheduler_config import SchedulerConfig
from kvcore.spec_decode import SpecDecodingStats, SpeculativeConfig
from kvcore.utils import cdiv


class _StepPlan:
    """Mutable bookkeeping of one ``schedule()`` call."""

    __slots__ = (
        "budget",
        "num_scheduled",
        "new_blocks",
        "new",
        "resumed",
        "running",
        "preempted",
        "spec_tokens",
        "drafts_needed",
        "prefill_scheduled",
    )

    def __init__(self, budget: int, drafts_needed: bool) -> None:
        self.budget = budget
        self.spec_tokens: dict[str, list[int]] = {}
        self.drafts_needed = drafts_needed
        self.prefill_scheduled = False
        self.num_scheduled: dict[str, int] = {}
        self.new_blocks: dict[str, KVCacheBlocks] = {}
        self.new: list[Request] = []
        self.resumed: list[Request] = []
        self.running: list[Request] = []
        self.preempted: list[Request] = []

    def tokens_left(self, draft_slots: int) -> int:
        """Tokens the next request may be scheduled: the token budget less every
        scheduled request's drafting slots and its own (vLLM's ``input_budget -
        draft_slots``; both budgets start at ``max_num_batched_tokens`` in kvcore)."""
        return self.budget - draft_slots * (len(self.num_scheduled) + 1)


class Scheduler:
    """Mirrors vLLM 0.33.0's ``vllm.v1.core.sched.scheduler.Scheduler`` (sync mode).

    Decides, step by step, which requests run and how many tokens each computes.

    Running requests are served first, in admission order; waiting requests are
    admitted only in steps without preemption, strictly in queue order (the first
    that does not fit blocks the rest). Preemption is by recompute.
    """

    def __init__(
        self,
        scheduler_config: SchedulerConfig,
        kv_cache_config: KVCacheConfig,
        enable_caching: bool = True,
        watermark: float = 0.0,
        enable_kv_cache_events: bool = False,
        log_stats: bool = True,
        max_concurrent_batches: int = 1,
        connector: OffloadingConnectorScheduler | NixlConnectorScheduler | None = None,
        speculative_config: SpeculativeConfig | None = None,
        use_v2_model_runner: bool = True,
    ) -> None:
        """``max_concurrent_batches``: batches in flight at once (vLLM's
        ``VllmConfig.max_concurrent_batches``: 1 here, 2 for async scheduling); the KV
        cache manager reserves window blocks for that many batches' tokens.

        ``connector``: the scheduler side of the CPU KV offload tier (vLLM's
        ``OffloadingConnector`` in the scheduler role) or of the P/D connector (vLLM's
        ``NixlConnector``), both covered by kvcore's conformance with either loop, or
        None (the default: no
        connector, and none of the code below that reads it runs). With async
        scheduling both connectors are consumers (``is_kv_consumer``), so block frees
        wait for the batches in flight (``defer_block_free``), as in vLLM.

        ``speculative_config``: speculative decoding (None: off). Its lookahead slots
        replace ``scheduler_config.num_lookahead_tokens``, which must then be 0. Not
        with a connector (that combination is not covered by kvcore's conformance).
        ``use_v2_model_runner``: vLLM's default model runner, whose drafter skips steps
        whose drafts nobody can use (``skip_drafts``); with the V1 runner it never
        does.

        Why long: it sets the fields of vLLM's Scheduler.__init__ (414 lines there) in
        vLLM's order, so every field has its counterpart in one place."""
        if speculative_config is not None:
            if connector is not None:
                raise ValueError(
                    "speculative decoding with the KV offloading connector is not modelled"
                )
            if scheduler_config.num_lookahead_tokens:
                raise ValueError(
                    "num_lookahead_tokens comes from the speculative config; leave it at 0"
                )
            if scheduler_config.max_num_batched_tokens <= speculative_config.num_lookahead_tokens:
                # vLLM's VllmConfig._set_max_num_scheduled_tokens
                raise ValueError(
                    f"max_num_batched_tokens ({scheduler_config.max_num_batched_tokens}) "
                    "leaves no slot for a token beside the "
                    f"{speculative_config.num_lookahead_tokens} lookahead slots of "
                    "speculative decoding; raise it or lower num_speculative_tokens"
                )
        self.scheduler_config = scheduler_config
        self.max_concurrent_batches = max_concurrent_batches
        self.max_model_len = scheduler_config.max_model_len
        self.max_num_running_reqs = scheduler_config.max_num_seqs
        self.max_num_scheduled_tokens = scheduler_config.max_num_batched_tokens
        self.policy = scheduler_config.policy
        self.log_stats = log_stats
        self.speculative_config = speculative_config
        spec = speculative_config
        self.num_spec_tokens = 0 if spec is None else spec.num_speculative_tokens
        self.num_lookahead_tokens = (
            scheduler_config.num_lookahead_tokens if spec is None else spec.num_lookahead_tokens
        )
        self.draft_slots = 0 if spec is None else spec.max_num_new_slots_for_drafting
        self.can_skip_drafts = spec is not None and spec.can_skip_drafts and use_v2_model_runner
        # Tokens after each block its hash must cover (EAGLE with prefix caching: 1);
        # requests must come with a block hasher built for it.
        self.num_hash_lookahead_tokens = (
            0 if spec is None else spec.num_hash_lookahead_tokens(enable_caching)
        )
        self.kv_cache_manager = KVCacheManager(
            kv_cache_config,
            self.max_model_len,
            enable_caching=enable_caching,
            max_in_flight_tokens=max_concurrent_batches * scheduler_config.max_num_batched_tokens,
            log_stats=log_stats,
            enable_kv_cache_events=enable_kv_cache_events,
            watermark=watermark,
        )
        self.block_size = self.kv_cache_manager.coordinator.block_size
        self.requests: dict[str, Request] = {}
        self.waiting = create_request_queue(self.policy)
        self.running: list[Request] = []
        self.finished_req_ids: set[str] = set()
        self.reset_preempted_req_ids: set[str] = set()
        self.connector = connector
        # KV connector state (vLLM's): waiting requests that hold blocks (an async
        # load's) are drained before ``waiting``; loads the worker reported done; and
        # requests still prefilling, whose remaining blocks an async load must leave.
        self.kv_holding_waiting = create_request_queue(self.policy)
        self.finished_recving_kv_req_ids: set[str] = set()
        self._inflight_prefills: set[Request] = set()
        self.connector_prefix_cache_stats: PrefixCacheStats | None = (
            PrefixCacheStats() if connector is not None and log_stats else None
        )
        # vLLM's connector flags: a failed load recomputes (else the request fails);
        # a producer drops a preempted request's output in flight; with overlapping
        # batches a consumer's frees wait for the steps that may still write them.
        self.recompute_kv_load_failures = (
            connector is not None and connector.kv_load_failure_policy == "recompute"
        )
        self.requires_kv_delivery = connector is not None and connector.requires_kv_delivery
        self.defer_block_free = (
            connector is not None and max_concurrent_batches > 1 and connector.is_kv_consumer
        )
        self.failed_recving_kv_req_ids: set[str] = set()
        self.sched_step_seq = 0
        self.processed_step_seq = 0
        self.deferred_frees: deque[tuple[int, list[KVCacheBlock]]] = deque()

    @property
    def unkeyed_unshared_ok(self) -> bool:
        """Whether unshared requests may be hashed unkeyed here (a kvsim shortcut,
        :class:`kvcore.block_hashing.UnkeyedHasher`): the KV cache allows it
        (:attr:`kvcore.kv_cache_manager.KVCacheManager.unkeyed_unshared_ok`) and no KV
        connector keys what it stores by block hash."""
        return self.connector is None and self.kv_cache_manager.unkeyed_unshared_ok

    # -- requests ------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        """Queue a new request (ids must be unique among unfinished requests; its block
        hasher, if any, must cover ``num_hash_lookahead_tokens``)."""
        if request.request_id in self.requests:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        lookahead = request.hash_lookahead_tokens
        if lookahead is not None and lookahead != self.num_hash_lookahead_tokens:
            raise ValueError(
                f"request {request.request_id!r}: its block hashes cover {lookahead} "
                "tokens past each block; this scheduler's speculative method needs "
                f"{self.num_hash_lookahead_tokens}"
            )
        self.waiting.add_request(request)
        self.requests[request.request_id] = request
        if self.connector is not None:
            self.connector.on_new_request(request)

    def get_num_unfinished_requests(self) -> int:
        return len(self.waiting) + len(self.kv_holding_waiting) + len(self.running)

    def has_requests(self) -> bool:
        """Unfinished requests, or finished ones not yet reported in a step's output
        (with a connector also: finished requests whose blocks wait for a load, and
        transfers in flight)."""
        if self.waiting or self.running or self.finished_req_ids:
            return True
        connector = self.connector
        if connector is None:
            return False
        return (
            bool(self.kv_holding_waiting)
            or len(self.requests) > len(self.running) + len(self.kv_holding_waiting)
            or connector.has_pending_push_work()
        )

    # -- scheduling ----------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        """Plan one step: tokens per request, block allocations, preemptions."""
        plan = _StepPlan(self.max_num_scheduled_tokens, not self.can_skip_drafts)
        num_eligible = len(self.running) + len(self.waiting) + len(self.kv_holding_waiting)
        threshold = self.scheduler_config.long_prefill_token_threshold if num_eligible > 1 else 0
        self._schedule_running(plan, threshold)
        if not plan.preempted:
            self._schedule_waiting(plan, threshold)
        out = SchedulerOutput(
            num_scheduled_tokens=plan.num_scheduled,
            total_num_scheduled_tokens=sum(plan.num_scheduled.values()),
            scheduled_new_reqs=[r.request_id for r in plan.new],
            scheduled_resumed_reqs=[r.request_id for r in plan.resumed],
            scheduled_running_reqs=[r.request_id for r in plan.running],
            req_to_new_blocks=plan.new_blocks,
            preempted_req_ids=self.reset_preempted_req_ids,
            finished_req_ids=self.finished_req_ids,
        )
        if self.num_spec_tokens:
            out.scheduled_spec_decode_tokens = plan.spec_tokens
            out.num_spec_tokens_to_schedule = self.num_spec_tokens
            out.skip_drafts = not plan.drafts_needed
        if self.connector is not None:
            out.kv_connector_metadata = self.connector.build_connector_meta(out)
            if self.defer_block_free and out.total_num_scheduled_tokens > 0:
                self.sched_step_seq += 1
        self._update_after_schedule(out)
        return out

    def _schedule_running(self, plan: _StepPlan, threshold: int) -> None:
        """Why long: it mirrors the running-queue loop of vLLM's Scheduler.schedule (1,086
        lines there) in vLLM's order; allocation, preemption and the spec-token budget
        share the loop's locals."""
        running = self.running
        kvm = self.kv_cache_manager
        allocate = kvm.allocate_running_slots
        lookahead = self.num_lookahead_tokens
        max_model_len = self.max_model_len
        draft_slots = self.draft_slots
        req_index = 0
        while req_index < len(running) and plan.budget > 0:
            request = running[req_index]
            budget = plan.tokens_left(draft_slots) if draft_slots else plan.budget
            if budget <= 0:
                break
            computed = request.num_computed_tokens
            placeholders = request.num_output_placeholders
            if (
                placeholders > 0
                and computed + 2 - placeholders >= request.num_prompt_tokens + request.max_tokens
            ):
                # Async: the step in flight already samples the last token (max_tokens).
                req_index += 1
                continue
            n = len(request._all_token_ids) + len(request.spec_token_ids) + placeholders - computed
            if 0 < threshold < n:
                n = threshold
            if n > budget:
                n = budget
            if n > max_model_len - computed - 1:
                n = max_model_len - computed - 1
            if n == 0:
                req_index += 1
                continue
            while True:
                new_blocks = allocate(request, n, lookahead)
                if new_blocks is not None:
                    break
                victim = self._pick_victim()
                if self.defer_block_free and not self._request_blocks_can_be_freed(victim):
                    break  # a deferred free would not help this allocation
                if self.policy == "priority":
                    idx = running.index(victim)
                    del running[idx]
                    if idx < req_index:
                        req_index -= 1
                    if victim.request_id in plan.num_scheduled:
                        plan.running.remove(victim)
                        plan.budget += plan.num_scheduled.pop(victim.request_id)
                        plan.new_blocks.pop(victim.request_id)
                        plan.spec_tokens.pop(victim.request_id, None)
                else:
                    running.pop()
                self._preempt_request(victim)
                plan.preempted.append(victim)
                if victim is request:
                    break
            if new_blocks is None:
                if self.policy == "priority" and request.status == RequestStatus.PREEMPTED:
                    continue
                break
            plan.running.append(request)
            plan.prefill_scheduled |= request.is_prefill_chunk
            plan.new_blocks[request.request_id] = new_blocks
            plan.num_scheduled[request.request_id] = n
            plan.budget -= n
            req_index += 1
            if not plan.drafts_needed:
                plan.drafts_needed = not self._drafts_unused(request, computed, n)
            spec_ids = request.spec_token_ids
            if spec_ids:
                num_spec = n + computed - request.num_tokens - placeholders
                if num_spec > 0:
                    plan.spec_tokens[request.request_id] = (
                        spec_ids[:num_spec] if len(spec_ids) > num_spec else spec_ids
                    )
                # The next drafts arrive with update_draft_token_ids (sync) or as
                # placeholders (async) before the next step.
                request.spec_token_ids = []

    @staticmethod
    def _drafts_unused(request: Request, num_computed: int, num_new: int) -> bool:
        """vLLM's ``_drafts_unused``: the drafts proposed after this step surely go
        unused (a non-final prefill chunk samples nothing; a step that samples the
        last output token ends the request even if every draft is rejected)."""
        if num_computed + num_new < request.num_tokens:
            return True
        min_outputs = request.num_output_tokens + 1
        if request.num_output_placeholders > 0:
            min_outputs += 1  # async: the step in flight samples one more
        return min_outputs >= request.max_tokens

    def _pick_victim(self) -> Request:
        """FCFS: the last admitted; priority: the least important, latest arrival."""
        if self.policy == "priority":
            return max(self.running, key=lambda r: (r.priority, r.arrival_time))
        return self.running[-1]

    def _schedule_waiting(self, plan: _StepPlan, threshold: int) -> None:
        """Why long: it mirrors the waiting-queue loop of vLLM's Scheduler.schedule (1,086
        lines there) in vLLM's order; its branches (connector loads, prefix hits,
        chunking, skipping) share the loop's token budget and locals, so pieces cut out
        would each take most of them."""
        kvm = self.kv_cache_manager
        waiting = self.waiting
        holding = self.kv_holding_waiting  # empty without a connector
        connector = self.connector
        chunked = self.scheduler_config.enable_chunked_prefill
        reserve_full = self.scheduler_config.scheduler_reserve_full_isl
        skipped: deque[Request] = deque()
        skipped_holding: deque[Request] = deque()
        draft_slots = self.draft_slots
        num_spec = self.num_spec_tokens
        while plan.budget > 0:
            queue = holding if holding else waiting
            if not queue or (draft_slots and plan.tokens_left(draft_slots) <= 0):
                break
            if len(self.running) >= self.max_num_running_reqs:
                break
            request = queue.peek_request()
            if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                # vLLM's _handle_blocked_waiting_request: wait for the load.
                if request.request_id not in self.finished_recving_kv_req_ids:
                    self._skip_waiting(queue, skipped, skipped_holding)
                    continue
                self._update_waiting_for_remote_kv(request)
                request.status = (
                    RequestStatus.PREEMPTED if request.num_preemptions else RequestStatus.WAITING
                )
            if request.num_stale_output_tokens and not request.drop_stale_output:
                # Async: output of a step from before its preemption is still in
                # flight; resuming now could sample a position that output fills
                # (unless that output is to be dropped).
                self._skip_waiting(queue, skipped, skipped_holding)
                continue
            num_external = 0
            load_kv_async = False
            connector_queries = 0
            did_lookup = request.num_computed_tokens == 0
            if did_lookup:
                computed_blocks, num_local = kvm.get_computed_blocks(request)
                if connector is not None:
                    ext, load_kv_async = connector.get_num_new_matched_tokens(request, num_local)
                    if request.skip_reading_prefix_cache:
                        ext, load_kv_async = 0, False
                    if ext is None:  # the connector decides later
                        self._skip_waiting(queue, skipped, skipped_holding)
                        continue
                    num_external = ext
                    connector_queries = request.num_tokens - num_local
                num_computed = num_local + num_external
                if connector is not None and request.num_preemptions <= 0:
                    request.num_prefill_cached_tokens = num_computed
            else:
                computed_blocks, num_local = kvm.empty_kv_cache_blocks, 0
                num_computed = request.num_computed_tokens
            pad_spec = False
            if load_kv_async:
                n = 0  # loading: nothing to compute in this step
            else:
                budget = plan.tokens_left(draft_slots)
                n = request.num_tokens - num_computed
                if (
                    num_spec
                    and n == 1
                    and not plan.prefill_scheduled
                    and (plan.running or num_computed > 0)
                    and num_computed + num_spec + 2 <= self.max_model_len
                ):
                    # vLLM pads a one-token admission to a uniform decode size
                    # (1 + k, placeholder drafts) for the CUDA graph.
                    if 1 + num_spec > budget:
                        break
                    n = 1 + num_spec
                    pad_spec = True
                if 0 < threshold < n:
                    n = threshold
                if not chunked and n > budget:
                    break
                n = min(n, budget)
            new_blocks = kvm.allocate_slots(
                request,
                n,
                num_new_computed_tokens=num_local,
                new_computed_blocks=computed_blocks,
                num_lookahead_tokens=0 if load_kv_async else self.num_lookahead_tokens,
                delay_cache_blocks=load_kv_async,
                full_sequence_must_fit=reserve_full,
                reserved_blocks=self._inflight_prefill_reserved_blocks() if load_kv_async else 0,
                has_scheduled_reqs=bool(self.running),
                num_external_computed_tokens=num_external,
            )
            if new_blocks is None:
                break
            if connector is not None:
                connector.update_state_after_alloc(
                    request, kvm.get_blocks(request.request_id), num_external
                )
                stats = self.connector_prefix_cache_stats
                if stats is not None and connector_queries != 0:
                    stats.record(connector_queries, num_external, request.num_preemptions > 0)
            if did_lookup:
                kvm.record_prefix_cache_stats(request, num_local)
                if request.num_cached_tokens < 0:
                    request.num_cached_tokens = num_local
            if load_kv_async:
                # Blocks are held while the KV arrives; the request waits for it.
                request.status = RequestStatus.WAITING_FOR_REMOTE_KVS
                request.num_computed_tokens = num_computed
                self._inflight_prefills.add(request)
                self._skip_waiting(queue, skipped, skipped_holding)
                continue
            queue.pop_request()
            self.running.append(request)
            if request.status == RequestStatus.WAITING:
                plan.new.append(request)
            else:
                plan.resumed.append(request)
            plan.new_blocks[request.request_id] = kvm.get_blocks(request.request_id)
            plan.num_scheduled[request.request_id] = n
            plan.budget -= n
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_computed
            if not plan.drafts_needed:
                plan.drafts_needed = not self._drafts_unused(request, num_computed, n)
            if pad_spec:
                plan.spec_tokens[request.request_id] = [-1] * num_spec
            if connector is not None and num_computed + n < request.num_tokens:
                self._inflight_prefills.add(request)
        if skipped_holding:
            holding.prepend_requests(skipped_holding)
        if skipped:
            waiting.prepend_requests(skipped)

    @staticmethod
    def _holds_kv_blocks(request: Request) -> bool:
        return (
            request.num_computed_tokens > 0
            or request.status == RequestStatus.WAITING_FOR_REMOTE_KVS
        )

    def _skip_waiting(
        self,
        queue: FCFSRequestQueue | PriorityRequestQueue,
        skipped: deque[Request],
        skipped_holding: deque[Request],
    ) -> None:
        """vLLM's ``skip_request``: set the head of ``queue`` aside for this step
        (block holders go back to ``kv_holding_waiting``)."""
        request = queue.pop_request()
        if self._holds_kv_blocks(request):
            skipped_holding.appendleft(request)
        else:
            skipped.appendleft(request)

    def _update_waiting_for_remote_kv(self, request: Request) -> None:
        """The load is done: register the loaded blocks in the prefix cache; a whole
        prompt loaded still recomputes its last token (to sample the next one). After
        a failed load (recompute policy) only the valid prefix is cached, or, with
        none, the blocks are released (the request starts over)."""
        rid = request.request_id
        if rid in self.failed_recving_kv_req_ids:
            if request.num_computed_tokens:
                self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens)
            else:
                self.kv_cache_manager.free(request)
            self.failed_recving_kv_req_ids.remove(rid)
        else:
            self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens)
        if request.num_computed_tokens == request.num_tokens:
            request.num_computed_tokens = request.num_tokens - 1
        self.finished_recving_kv_req_ids.remove(request.request_id)

    def _inflight_prefill_reserved_blocks(self) -> int:
        """Blocks the requests still prefilling need to hold their whole sequence."""
        coordinator = self.kv_cache_manager.coordinator
        empty = self.kv_cache_manager.empty_kv_cache_blocks.blocks
        total = 0
        for r in self._inflight_prefills:
            total += coordinator.get_num_blocks_to_allocate(
                r.request_id,
                min(r.num_tokens, self.max_model_len),
                empty,
                r.num_computed_tokens,
                apply_admission_cap=True,
            )
        return total

    def _preempt_request(self, request: Request) -> None:
        """Free all of the request's blocks and send it to the front of the queue."""
        assert request.status == RequestStatus.RUNNING, "only running requests are preempted"
        self._free_request_blocks(request)
        if self.connector is not None:
            self._inflight_prefills.discard(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.spec_token_ids = []
        # Async: output still in flight is stale; it is delivered, counters untouched
        # (dropped instead for a KV producer, whose hand-off the free just broke; an
        # undrained dropped share stays dropped).
        if self.connector is not None:
            request.drop_stale_output = self.requires_kv_delivery or (
                request.drop_stale_output and request.num_stale_output_tokens > 0
            )
        request.num_stale_output_tokens = request.num_in_flight_tokens
        request.num_output_placeholders = 0
        request.num_preemptions += 1
        self.waiting.prepend_request(request)
        self.reset_preempted_req_ids.add(request.request_id)

    def _update_after_schedule(self, out: SchedulerOutput) -> None:
        requests = self.requests
        for rid, n in out.num_scheduled_tokens.items():
            request = requests[rid]
            request.num_computed_tokens += n
            request.num_in_flight_tokens += n
            request.is_prefill_chunk = request.num_computed_tokens < (
                request.num_tokens + request.num_output_placeholders
            )
            if self.connector is not None and not request.is_prefill_chunk:
                self._inflight_prefills.discard(request)
        if self.defer_block_free:
            # The step each request was last scheduled in, to fence deferred frees.
            seq = self.sched_step_seq
            for rid in out.num_scheduled_tokens:
                requests[rid].last_sched_seq = seq
        self.finished_req_ids = set()
        self.reset_preempted_req_ids = set()

    # -- model output --------------------------------------------------------------

    def update_from_output(
        self,
        scheduler_output: SchedulerOutput,
        sampled_token_ids: Mapping[str, Sequence[int]],
        kv_connector_output: KVConnectorOutput | None = None,
    ) -> EngineStepOutput:
        """Append sampled tokens, stop finished requests and free their blocks.

        ``kv_connector_output``: what the connector's workers report for the step
        (finished transfers), applied after the tokens (vLLM's
        ``_update_from_kv_xfer_finished``); failed loads are handled first.

        Why long: it mirrors vLLM's Scheduler.update_from_output (418 lines there) step
        for step, in vLLM's order, so the two read side by side."""
        result = EngineStepOutput()
        if self.defer_block_free and scheduler_output.total_num_scheduled_tokens > 0:
            # Every write of this and earlier steps is done: deferred frees may go.
            self.processed_step_seq += 1
            self._drain_deferred_frees()
        failed_kv_load_req_ids: set[str] | None = None  # set only after failed loads
        if (
            kv_connector_output is not None
            and self.connector is not None
            and (kv_connector_output.failed_recving or kv_connector_output.invalid_block_ids)
        ):
            failed_kv_load_req_ids = self._handle_failed_loads(
                kv_connector_output, scheduler_output.num_scheduled_tokens
            )
        stopped: list[Request] = []
        stopped_waiting: list[Request] = []
        preempted = RequestStatus.PREEMPTED
        running = RequestStatus.RUNNING
        spec_tokens = scheduler_output.scheduled_spec_decode_tokens
        spec_stats: SpecDecodingStats | None = None
        cache_always = self.num_spec_tokens > 0
        for rid, n in scheduler_output.num_scheduled_tokens.items():
            request = self.requests.get(rid)
            if request is None:
                continue
            request.num_in_flight_tokens -= n
            stale = False
            if request.num_stale_output_tokens > 0:  # async: scheduled before a preemption
                stale = True
                request.num_stale_output_tokens -= n
            if failed_kv_load_req_ids is not None and rid in failed_kv_load_req_ids:
                continue
            status_before = request.status
            if status_before > preempted:  # finished (is_finished)
                continue
            if stale and request.drop_stale_output:
                continue  # async, KV producer: output from before a preemption
            sampled = sampled_token_ids.get(rid)
            if not sampled:
                continue
            drafts = spec_tokens.get(rid) if spec_tokens else None
            if drafts:
                # vLLM: the tokens after the first are accepted drafts; rejected ones
                # roll back the computed tokens (and, async, the placeholders).
                num_accepted = len(sampled) - 1
                num_rejected = len(drafts) - num_accepted
                if not stale:
                    if request.num_computed_tokens > 0:
                        request.num_computed_tokens -= num_rejected
                    if request.num_output_placeholders > 0:
                        request.num_output_placeholders -= num_rejected
                if self.log_stats:
                    if spec_stats is None:
                        spec_stats = SpecDecodingStats.new(self.num_spec_tokens)
                    spec_stats.observe_draft(len(drafts), num_accepted)
            if len(sampled) == 1:  # the usual case, without the general loop
                new_ids = [sampled[0]]
                request.append_output_token_id(sampled[0])
                is_stopped = check_stop(request, self.max_model_len)
            else:
                new_ids = list(sampled)
                is_stopped = False
                for i, token in enumerate(new_ids, 1):
                    request.append_output_token_ids(token)
                    if check_stop(request, self.max_model_len):
                        if not stale:
                            request.num_computed_tokens -= len(new_ids) - i
                        del new_ids[i:]
                        is_stopped = True
                        break
            placeholders = request.num_output_placeholders
            if not stale and (placeholders > 0 or cache_always):
                if placeholders > 0:
                    # Async: every returned token (also those cut at a stop) resolves one.
                    request.num_output_placeholders = placeholders - len(sampled)
                if status_before == running:
                    self.kv_cache_manager.cache_blocks(
                        request, request.num_computed_tokens - request.num_in_flight_tokens
                    )
            result.new_token_ids[rid] = new_ids
            if is_stopped:
                params = self._free_request(request)
                if params is not None:
                    if params.get("do_remote_prefill") and request.num_output_tokens == len(
                        sampled
                    ):
                        # vLLM: the prefill stats go with the request's first output.
                        params["remote_prefill_cached_tokens"] = request.num_prefill_cached_tokens
                    result.kv_transfer_params[rid] = params
                result.finished_req_ids.append(rid)
                result.finished_requests.append(request)
                if status_before == running:
                    stopped.append(request)
                else:  # async: stale output stopped a preempted request
                    stopped_waiting.append(request)
        if stopped:
            gone = set(stopped)
            self.running = [r for r in self.running if r not in gone]
        if stopped_waiting:
            self.waiting.remove_requests(stopped_waiting)
            if self.kv_holding_waiting:
                self.kv_holding_waiting.remove_requests(stopped_waiting)
        if failed_kv_load_req_ids and not self.recompute_kv_load_failures:
            # vLLM collects the ids in a set: their order follows string hashing;
            # kvcore fails them sorted.
            for request in self.finish_requests(
                sorted(failed_kv_load_req_ids), RequestStatus.FINISHED_ERROR
            ):
                result.finished_req_ids.append(request.request_id)
                result.finished_requests.append(request)
        if kv_connector_output is not None and self.connector is not None:
            self._update_from_kv_xfer_finished(kv_connector_output)
        result.prefix_cache_stats = self.kv_cache_manager.make_prefix_cache_stats()
        result.kv_events = self.kv_cache_manager.take_events()
        result.spec_decoding_stats = spec_stats
        return result

    def update_draft_token_ids(self, draft_token_ids: Mapping[str, Sequence[int]]) -> None:
        """Mirrors ``Scheduler.update_draft_token_ids``: the drafts the drafter proposed
        after a synchronous step, per request id, become each request's
        ``spec_token_ids`` for its next step (unknown and finished requests are
        skipped; a request still prefilling drops its drafts)."""
        requests = self.requests
        for rid, drafts in draft_token_ids.items():
            request = requests.get(rid)
            if request is None or request.is_finished():
                continue
            if request.is_prefill_chunk:
                if request.spec_token_ids:
                    request.spec_token_ids = []
                continue
            request.spec_token_ids = list(drafts)

    def _free_request(
        self, request: Request, delay_free_blocks: bool = False
    ) -> dict[str, Any] | None:
        """Report the request finished and free its blocks (unless the connector
        keeps them); returns the connector's transfer parameters for its output."""
        connector = self.connector
        params = None
        if connector is not None:
            self._inflight_prefills.discard(request)
            block_ids = self.kv_cache_manager.get_block_ids_for_computed_tokens(
                request.request_id, request.num_computed_tokens
            )
            delay, params = connector.request_finished(request, block_ids)
            delay_free_blocks |= delay
        self.finished_req_ids.add(request.request_id)
        if not delay_free_blocks:
            self._free_blocks(request)
        return params

    def _free_blocks(self, request: Request) -> None:
        self._free_request_blocks(request)
        del self.requests[request.request_id]

    def _request_blocks_can_be_freed(self, request: Request) -> bool:
        """vLLM's ``_request_blocks_can_be_freed``: no step that may still write the
        request's blocks is in flight (always, unless frees are deferred)."""
        return not self.defer_block_free or request.last_sched_seq <= self.processed_step_seq

    def _free_request_blocks(self, request: Request) -> None:
        """vLLM's ``_free_request_blocks``: free now, or hold the blocks until the
        steps in flight are done (async scheduling with a KV consumer)."""
        if self._request_blocks_can_be_freed(request):
            self.kv_cache_manager.free(request)
            return
        blocks = self.kv_cache_manager.pop_blocks_for_free(request)
        if blocks:
            self.deferred_frees.append((self.sched_step_seq, blocks))

    def _drain_deferred_frees(self) -> None:
        """vLLM's ``_drain_deferred_frees``: return the held blocks whose steps are
        done, in order, each list tail first."""
        frees = self.deferred_frees
        while frees and frees[0][0] <= self.processed_step_seq:
            _, blocks = frees.popleft()
            self.kv_cache_manager.free_popped_blocks(blocks)

    def _update_from_kv_xfer_finished(self, kv_connector_output: KVConnectorOutput) -> None:
        """vLLM's ``_update_from_kv_xfer_finished``: let the connector apply finished
        jobs, mark finished loads (a request aborted while loading is freed now)."""
        assert self.connector is not None
        self.connector.update_connector_output(kv_connector_output)
        for rid in sorted(kv_connector_output.finished_recving):
            request = self.requests[rid]
            if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                self.finished_recving_kv_req_ids.add(rid)
            else:
                assert request.is_finished()
                self._free_blocks(request)
        for rid in sorted(kv_connector_output.finished_sending):
            self._free_blocks(self.requests[rid])

    def _handle_failed_loads(
        self, kv_connector_output: KVConnectorOutput, num_scheduled: dict[str, int]
    ) -> set[str]:
        """The start of vLLM's ``update_from_output`` with a connector: the requests
        a failed load affects, to skip in this step's output (and, by the fail policy,
        to fail at its end)."""
        failed: set[str] = set()
        if kv_connector_output.failed_recving:
            failed |= self._handle_failed_recving(kv_connector_output.failed_recving)
        if kv_connector_output.invalid_block_ids:
            failed |= self._handle_invalid_blocks(
                kv_connector_output.invalid_block_ids, num_scheduled
            )
        return failed

    def _handle_failed_recving(self, failed_req_ids: set[str]) -> set[str]:
        """vLLM's ``_handle_failed_recving``: a failed load of a waiting request is
        redone locally (recompute policy: from token 0) or fails the request (the
        ids returned)."""
        affected: set[str] = set()
        for rid in failed_req_ids:
            request = self.requests.get(rid)
            if request is not None and request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                affected.add(rid)
                if self.recompute_kv_load_failures:
                    request.num_computed_tokens = 0
                    self.failed_recving_kv_req_ids.add(rid)
        return set() if self.recompute_kv_load_failures else affected

    def _handle_invalid_blocks(
        self, invalid_block_ids: set[int], num_scheduled: dict[str, int]
    ) -> set[str]:
        """vLLM's ``_handle_invalid_blocks``: requests whose computed tokens reach a
        block a load left unwritten go back to the longest valid prefix. Returns the
        requests to skip in this step's output (fail policy: every one affected)."""
        if len(self.kv_cache_manager.kv_cache_config.kv_cache_groups) > 1:
            raise RuntimeError(
                "a KV connector reported invalid_block_ids, which vLLM refuses for models "
                "with more than one KV cache group"
            )
        loading = [
            r for r in self.kv_holding_waiting if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS
        ]
        async_failed, _ = self._update_requests_with_invalid_blocks(
            loading, invalid_block_ids, num_scheduled, evict_blocks=False
        )
        sync_failed, to_evict = self._update_requests_with_invalid_blocks(
            self.running, invalid_block_ids, num_scheduled, evict_blocks=True
        )
        if not async_failed and not sync_failed:
            return set()
        if to_evict and not self.recompute_kv_load_failures:
            # vLLM evicts them from the prefix cache; only a synchronous load (no
            # kvcore connector has one) leaves invalid blocks in running requests.
            raise NotImplementedError("failed synchronous KV loads are not modelled")
        if not self.recompute_kv_load_failures:
            return async_failed | sync_failed
        self.failed_recving_kv_req_ids |= async_failed
        return sync_failed

    def _update_requests_with_invalid_blocks(
        self,
        requests: Iterable[Request],
        invalid_block_ids: set[int],
        num_scheduled: dict[str, int],
        evict_blocks: bool,
    ) -> tuple[set[str], set[int]]:
        """vLLM's ``_update_requests_with_invalid_blocks``: cut each request's computed
        tokens at its first invalid block (a block shared with an earlier request of
        the scan is recomputed by that one); the affected ids and, with
        ``evict_blocks``, every block from each first invalid one on."""
        affected: set[str] = set()
        to_evict: set[int] = set()
        marked: set[int] = set()
        bs = self.block_size
        for request in requests:
            rid = request.request_id
            (block_ids,) = self.kv_cache_manager.get_block_ids(rid)
            computed = request.num_computed_tokens - num_scheduled.get(rid, 0)
            is_affected = marked_own = False
            for idx, bid in zip(range(cdiv(computed, bs)), block_ids):
                if bid not in invalid_block_ids:
                    continue
                is_affected = True
                if bid in marked:
                    continue
                marked.add(bid)
                if marked_own:
                    continue
                marked_own = True
                request.num_computed_tokens = idx * bs
                if evict_blocks:
                    to_evict.update(block_ids[idx:])
            if is_affected:
                if not marked_own:
                    request.num_computed_tokens = computed
                affected.add(rid)
        return affected, to_evict

    def finish_requests(
        self, request_ids: str | Iterable[str] | None, status: RequestStatus
    ) -> list[Request]:
        """Mirrors ``Scheduler.finish_requests``: end requests from outside the
        scheduler (the engine's ``abort_requests`` with ``FINISHED_ABORTED`` when a
        client goes away). None ends every request. Unknown and already finished ids
        are skipped. The requests leave the running list and the waiting queue first,
        then each gets ``status`` and is freed (its blocks back to the pool, its id
        reported in the next step's ``finished_req_ids``). Returns the requests ended.

        vLLM takes the ids as a set, so the order in which several ids of one call
        are freed follows string hashing; kvcore frees them in the order given
        (first occurrence), the same as vLLM for one id per call."""
        assert RequestStatus.is_finished(status)
        if isinstance(request_ids, str):
            ids: Iterable[str] = (request_ids,)
        elif request_ids is None:
            ids = list(self.requests)
        else:
            ids = dict.fromkeys(request_ids)
        # The running ones by id: a str's hash is cached, a request's is a call.
        running: set[str] = set()
        waiting: list[Request] = []
        ended: list[Request] = []
        for rid in ids:
            request = self.requests.get(rid)
            if request is None or request.is_finished():
                continue
            ended.append(request)
            if request.status == RequestStatus.RUNNING:
                running.add(rid)
            else:
                waiting.append(request)
        if running:
            self.running = [r for r in self.running if r.request_id not in running]
        if waiting:
            self.waiting.remove_requests(waiting)
            if self.kv_holding_waiting:
                self.kv_holding_waiting.remove_requests(waiting)
        for request in ended:
            delay_free_blocks = False
            if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                # Its load is in flight: the blocks go when the worker reports it.
                rid = request.request_id
                delay_free_blocks = rid not in self.finished_recving_kv_req_ids
                self.finished_recving_kv_req_ids.discard(rid)
                self.failed_recving_kv_req_ids.discard(rid)
            request.status = status
            self._free_request(request, delay_free_blocks)
        return ended

    def reset_prefix_cache(self) -> bool:
        return self.kv_cache_manager.reset_prefix_cache()

    def get_kv_cache_usage(self) -> float:
        return self.kv_cache_manager.usage

    def check_invariants(self) -> None:
        """Raise AssertionError if scheduler and KV cache state disagree."""
        self.kv_cache_manager.check_invariants(blocks for _, blocks in self.deferred_frees)
        running_ids = [r.request_id for r in self.running]
        waiting_ids = [r.request_id for r in self.waiting]
        waiting_ids += [r.request_id for r in self.kv_holding_waiting]
        assert len(set(running_ids)) == len(running_ids), "a request runs twice"
        assert not set(running_ids) & set(waiting_ids), "a request is running and waiting"
        live = set(running_ids) | set(waiting_ids)
        if self.connector is None:
            assert live == set(self.requests), "lost a request"
        else:  # finished requests may keep their blocks until their load is done
            assert live <= set(self.requests), "lost a request"
            assert all(self.requests[rid].is_finished() for rid in set(self.requests) - live), (
                "lost a request"
            )
        assert len(self.running) <= self.max_num_running_reqs, "too many running requests"
        coordinator = self.kv_cache_manager.coordinator
        for r in self.running:
            assert r.status == RequestStatus.RUNNING, f"{r.request_id} running as {r.status}"
            assert (
                r.num_computed_tokens
                <= r.num_tokens + r.num_output_placeholders + self.num_lookahead_tokens
            )
            for blocks in coordinator.get_blocks(r.request_id):
                assert len(blocks) >= cdiv(r.num_computed_tokens, self.block_size), (
                    f"{r.request_id} has fewer blocks than computed tokens"
                )
        for r in self.waiting:
            assert r.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED)
            assert all(not b for b in coordinator.get_blocks(r.request_id)), (
                f"waiting request {r.request_id} holds blocks"
            )
        for r in self.kv_holding_waiting:
            assert r.status in (
                RequestStatus.WAITING,
                RequestStatus.PREEMPTED,
                RequestStatus.WAITING_FOR_REMOTE_KVS,
            )
