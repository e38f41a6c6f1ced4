"""Exact fast-forward over decode-only iterations of the async-scheduling loop.

With async scheduling (:class:`kvcore.async_scheduler.AsyncScheduler` behind a
:class:`kvcore.batch_queue.BatchQueue` of 2 batches) a steady decode has one batch in
flight at the top of every engine iteration; the iteration schedules the next batch
(one output placeholder per request) and then applies the one in flight.
:func:`plan_async_decode_stretch` says how many such iterations can pass from now, and
:meth:`AsyncDecodeStretch.apply` performs ``k`` of them at once, in exactly the order
the batch queue's iterations would:

- iteration ``j`` (1-based) schedules batch ``N + j``: one token for every running
  request whose last token is not already in flight, with slots for ``L + j +
  lookahead`` tokens (``L``: the request's ``num_tokens`` when the stretch starts;
  blocks from the free-queue head, in running order) and the blocks its first
  ``L + j - 1`` tokens fill registered in the prefix cache;
- then it applies batch ``N + j - 1``: one sampled token per request; requests whose
  output reaches ``max_tokens`` or whose length reaches ``max_model_len`` finish. A
  request finishing in iteration ``f`` was not scheduled in ``f`` (the scheduler's
  placeholder check); its output registers the blocks its first ``L + f - 1`` tokens
  fill, then it is freed (running order), as ``update_from_output`` does.

The stretch ends with the first iteration in which requests finish, or, planned
``through_finishes``, goes on with the requests left (those that finish are not in the
batches scheduled after); in either case before the first iteration whose allocations
the free blocks would not cover. Afterwards the batch scheduled by the last iteration is
the one in flight (:meth:`kvcore.batch_queue.BatchQueue.replace_in_flight`).

Scope as :mod:`kvcore.fast_forward`: full-attention groups only, KV events off, no
speculative drafts, requests that stop only on length. Mirrors nothing in vLLM: a
shortcut whose results equal the batch queue's step-by-step behaviour (see the tests).
"""

from __future__ import annotations

from typing import NamedTuple

from kvcore.batch_queue import BatchQueue
from kvcore.kv_cache_manager import KVCacheBlocks, PrefixCacheStats
from kvcore.request import Request, RequestStatus
from kvcore.sched_output import SchedulerOutput
from kvcore.single_type_kv_cache_manager import SingleTypeKVCacheManager
from kvcore.stretch_blocks import (
    StretchRecords,
    add_allocations,
    block_events,
    record_event_steps,
    stretch_length,
    stretch_possible,
)


class AsyncStretchResult(NamedTuple):
    """What :meth:`AsyncDecodeStretch.apply` did in its ``k`` iterations."""

    records: StretchRecords
    """Block counts after each iteration (its schedule, then its apply)."""
    finished: list[Request]
    """Requests that finished in the ``k`` iterations, by iteration and in running order
    within one, freed and removed from ``running`` (without ``through_finishes``: in
    iteration ``k`` only, and only when ``k == max_steps`` and ``finishes``)."""
    scheduler_output: SchedulerOutput
    """The batch iteration ``k`` scheduled, now the one in flight."""
    prefix_cache_stats: PrefixCacheStats | None
    """What iteration 1's apply reports (lookups made before the stretch, when no
    batch was applied since); the later iterations' are empty (nothing waits)."""
    finished_in: list[int]
    """The iteration (1-based) in which each of ``finished`` finished."""


class AsyncDecodeStretch:
    """Up to ``max_steps`` engine iterations of a steady async decode, applied at once.

    ``batch_size`` requests (all running ones) are in the batch in flight, each with one
    token (the batch in flight may complete prompts); ``context0`` is their total
    ``num_tokens`` at the start. Running request ``i`` finishes in iteration
    ``steps_left[i]`` and is in the batches of the iterations before it: batch ``N + j``
    (the ``j``-th scheduled) holds the requests with ``steps_left > j``, each computing
    over its ``num_tokens`` at the start plus ``j - 1``. Without ``through_finishes``,
    when ``finishes`` is true, iteration ``max_steps`` is the first in which requests
    finish, else none finishes within the stretch; with it, ``finishes`` says whether
    any finishes within ``max_steps``.
    """

    __slots__ = (
        "batch_size",
        "computed0",
        "context0",
        "finishes",
        "max_steps",
        "queue",
        "steps_left",
    )

    def __init__(
        self,
        queue: BatchQueue,
        max_steps: int,
        computed0: list[int],
        steps_left: list[int],
        finishes: bool,
    ) -> None:
        self.queue = queue
        self.max_steps = max_steps
        self.batch_size = len(computed0)
        self.computed0 = computed0
        self.context0 = sum(computed0)
        self.steps_left = steps_left
        self.finishes = finishes

    def apply(self, k: int, sample_token_id: int) -> AsyncStretchResult:
        """Advance ``k`` (1 <= k <= max_steps) iterations; see
        :class:`AsyncStretchResult` for what they did."""
        assert 1 <= k <= self.max_steps
        queue = self.queue
        sched = queue.scheduler
        kvm = sched.kv_cache_manager
        managers = kvm.coordinator.single_type_managers
        running = list(sched.running)
        computed0 = self.computed0
        # The iteration in which each request finishes, 0 for those that run on.
        ends = [left if left <= k else 0 for left in self.steps_left]
        by_step: dict[int, list[int]] = {}  # iteration -> its finishing requests' indices
        for i, f in enumerate(ends):
            if f:
                by_step.setdefault(f, []).append(i)
        order = sorted(by_step)
        finished = [running[i] for f in order for i in by_step[f]]
        finished_in = [f for f in order for _ in by_step[f]]
        alloc, cache, held_before_last = self._block_events(k, ends)
        self._advance_tokens(k, ends, sample_token_id)
        finished_before = sched.finished_req_ids
        finished_ids: dict[int, set[str]] = {}  # iteration -> ids its output finished

        def run_step(j: int) -> None:
            block_events(managers, alloc.get(j, ()), cache.get(j, ()))
            gone = by_step.get(j)
            if gone:
                for i in gone:  # its output's registration, then its free
                    kvm.cache_blocks(running[i], computed0[i] + j - 1)
                sched.finished_req_ids = set()  # the next schedule takes these
                ids = [running[i].request_id for i in gone]
                sched.finish_requests(ids, RequestStatus.FINISHED_LENGTH_CAPPED)
                finished_ids[j] = sched.finished_req_ids

        records = record_event_steps(
            kvm.block_pool, k, sorted(alloc.keys() | cache.keys() | by_step.keys()), run_step
        )
        # Iteration k's schedule took what iteration k - 1's output finished (before the
        # stretch: what the batch in flight's apply finishes); iteration k's own wait.
        sched.finished_req_ids = finished_ids.get(k, set())
        carried = finished_before if k == 1 else finished_ids.get(k - 1, set())
        sched.reset_preempted_req_ids = set()
        stats = kvm.make_prefix_cache_stats()  # iteration 1's; the others' are empty
        kvm.take_events()
        out = self._last_batch(held_before_last, carried)
        queue.replace_in_flight(k, out)
        return AsyncStretchResult(records, finished, out, stats, finished_in)

    def _block_events(
        self, k: int, ends: list[int]
    ) -> tuple[
        dict[int, list[tuple[Request, int]]], dict[int, list[tuple[Request, int]]], dict[str, int]
    ]:
        """The schedule-time events of ``k`` iterations, keyed by iteration, in running
        order: allocations (request, slots) and prefix-cache registrations (request,
        tokens); and the blocks each request still scheduled in iteration ``k`` holds
        before that iteration's schedule. ``ends``: the iteration each request
        finishes in (0: after the ``k``)."""
        sched = self.queue.scheduler
        kvm = sched.kv_cache_manager
        req_to_blocks = kvm.coordinator.single_type_managers[0].req_to_blocks
        bs = kvm.coordinator.block_size
        la = sched.num_lookahead_tokens
        mml = sched.max_model_len
        caching = kvm.enable_caching
        alloc: dict[int, list[tuple[Request, int]]] = {}
        cache: dict[int, list[tuple[Request, int]]] = {}
        held_before_last: dict[str, int] = {}
        for req, c0, f in zip(sched.running, self.computed0, ends):
            rid = req.request_id
            last = f - 1 if f else k  # iterations that schedule it
            held = len(req_to_blocks.get(rid) or ())
            # Iteration j (1-based) schedules token c0 + j - 1: slots for c0 + j + la.
            before_k = add_allocations(alloc, req, c0, held, last, k, la, mml, bs)
            if before_k >= 0:
                held_before_last[rid] = before_k
            if caching:
                # Iteration j registers the blocks the first c0 + j - 1 tokens fill.
                for q in range(-(-c0 // bs), (c0 + last - 1) // bs + 1):
                    if q:
                        cache.setdefault(q * bs - c0 + 1, []).append((req, q * bs))
        return alloc, cache, held_before_last

    def _advance_tokens(self, k: int, ends: list[int], sample_token_id: int) -> None:
        """Append the sampled tokens (before any caching: hashes must exist) and leave
        the counters as the batch queue would: one token in flight for the requests
        still running, none for those that finish (in iteration ``ends[i]``, with one
        token per iteration up to it)."""
        tokens = [sample_token_id] * k
        for req, f in zip(self.queue.scheduler.running, ends):
            if f:
                req.append_output_token_ids(tokens[:f])
                req.num_computed_tokens += f - 1
                req.num_in_flight_tokens = 0
                req.num_output_placeholders = 0
            else:
                req.append_output_token_ids(tokens)
                req.num_computed_tokens += k
                req.num_in_flight_tokens = 1

    def _last_batch(
        self, held_before_last: dict[str, int], finished_req_ids: set[str]
    ) -> SchedulerOutput:
        """The batch the last iteration scheduled (one token per running request, the
        blocks it allocated), which stays in flight after the stretch."""
        kvm = self.queue.scheduler.kv_cache_manager
        managers = kvm.coordinator.single_type_managers
        new_blocks: dict[str, KVCacheBlocks] = {}
        num_scheduled: dict[str, int] = {}
        for req in self.queue.scheduler.running:
            rid = req.request_id
            num_scheduled[rid] = 1
            before = held_before_last.get(rid)
            if before is None:
                new_blocks[rid] = kvm.empty_kv_cache_blocks
            else:
                new_blocks[rid] = kvm.create_kv_cache_blocks(
                    tuple(m.req_to_blocks[rid][before:] for m in managers)
                )
        return SchedulerOutput(
            num_scheduled_tokens=num_scheduled,
            total_num_scheduled_tokens=len(num_scheduled),
            scheduled_new_reqs=[],
            scheduled_resumed_reqs=[],
            scheduled_running_reqs=list(num_scheduled),
            req_to_new_blocks=new_blocks,
            preempted_req_ids=set(),
            finished_req_ids=finished_req_ids,
        )


def _steady(
    req: Request,
    n: int,
    managers: tuple[SingleTypeKVCacheManager, ...],
    bs: int,
    caching: bool,
) -> bool:
    """Whether ``req``, with ``n`` tokens in the batch in flight, is a steady decode:
    computed up to the token in flight (one placeholder, only that batch's tokens in
    flight, no stale output, no drafts, its prompt done), stopping only on length and,
    with caching, registered in the prefix cache up to its last computed token."""
    c = req.num_computed_tokens
    if (
        c != req.num_tokens
        or req.num_output_placeholders != 1
        or req.num_in_flight_tokens != n
        or req.num_stale_output_tokens
        or req.spec_token_ids
        or req.is_prefill_chunk
        or req.eos_token_id is not None
        or req.stop_token_ids
    ):
        return False
    if caching:
        rid = req.request_id
        full = min(c - 1, len(req.block_hashes) * bs) // bs
        for m in managers:
            if m.num_cached_block.get(rid, 0) < full:
                return False
    return True


def plan_async_decode_stretch(
    queue: BatchQueue, horizon: int, through_finishes: bool = False
) -> AsyncDecodeStretch | None:
    """The longest steady async decode stretch (at most ``horizon`` iterations) from
    the top of an engine iteration, or None; ``through_finishes``: going on past the
    iterations in which requests finish (see :class:`AsyncDecodeStretch`).

    Eligible when nothing waits and exactly one batch is in flight, in which every
    running request (in running order) samples: a decode, or the last part of its
    prompt (a new or resumed request). Every running request then has its sequence
    computed up to the token in flight (one output placeholder, only that batch's
    tokens in flight, no stale output), stops only on length (no EOS or stop tokens)
    and is registered in the prefix cache up to its last computed token; all groups
    are full attention, KV events are off and the token budget covers one token per
    request. Requests with no output yet get their first token when iteration 1
    applies the batch in flight.
    """
    sched = queue.scheduler
    if len(queue.queue) != 1 or not stretch_possible(sched):
        return None
    running = sched.running
    kvm = sched.kv_cache_manager
    managers = kvm.coordinator.single_type_managers
    in_flight = queue.queue[0].scheduler_output.num_scheduled_tokens
    if len(in_flight) != len(running):
        return None
    mml = sched.max_model_len
    bs = kvm.coordinator.block_size
    caching = kvm.enable_caching
    computed0: list[int] = []
    steps_left: list[int] = []
    for req, (rid, n) in zip(running, in_flight.items()):
        c = req.num_computed_tokens
        if rid != req.request_id or not _steady(req, n, managers, bs, caching):
            return None
        # Finishes in iteration f: its output reaches max_tokens or length max_model_len.
        f = min(req.max_tokens - req.num_output_tokens, mml - c)
        if f < 1:
            return None
        computed0.append(c)
        steps_left.append(f)
    planned = stretch_length(
        sched, computed0, steps_left, horizon, finish_lag=1, through_finishes=through_finishes
    )
    if planned is None:
        return None
    max_steps, finishes = planned
    return AsyncDecodeStretch(queue, max_steps, computed0, steps_left, finishes)
