"""Exact fast-forward over decode-only iterations of the async-scheduling loop.

With async scheduling (:class:`kvcore.async_scheduler.AsyncScheduler` behind a
:class:`kvcore.batch_queue.BatchQueue` of 2 batches) a steady decode has one batch in
flight at the top of every engine iteration; the iteration schedules the next batch
(one output placeholder per request) and then applies the one in flight.
:func:`kvcore.fast_forward_async_plan.plan_async_decode_stretch` says how many such
iterations can pass from now, and
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

Requests that arrive meanwhile may be admitted by the stretch's iterations
(:class:`kvcore.stretch_joins.Join`): the iteration's schedule takes each, after the
running decodes, with its whole prompt, as ``Scheduler.schedule`` takes a waiting
request, and it decodes with the others from the next iteration on.

Scope as :mod:`kvcore.fast_forward`: full-attention groups only, KV events off, no
speculative drafts, requests that stop only on length. Mirrors nothing in vLLM: a
shortcut whose results equal the batch queue's step-by-step behaviour (see the tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from kvcore.batch_queue import BatchQueue
from kvcore.kv_cache_manager import KVCacheBlocks, PrefixCacheStats
from kvcore.request import Request, RequestStatus
from kvcore.sched_output import SchedulerOutput
from kvcore.stretch_blocks import (
    StretchRecords,
    add_allocations,
    block_events,
    record_event_steps,
)
from kvcore.stretch_joins import Join, admit, first_prefills, prompt_blocks


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
    join_stats: dict[int, PrefixCacheStats | None]
    """What the apply of each iteration after the first that admitted requests
    reports: their prefix-cache lookups (iteration 1's are in ``prefix_cache_stats``)."""


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

    ``joins`` (in iteration order) are admitted within the stretch: join ``i`` decodes
    from iteration ``joins[i].iteration + 1`` on as a running request whose ``num_tokens``
    at the start would have been ``join_computed0[i]``, and finishes in iteration
    ``join_steps_left[i]``. A stretch is never applied to end in an iteration that
    admits requests (its last batch must be one of decodes): see :meth:`can_end_at`.
    """

    __slots__ = (
        "batch_size",
        "computed0",
        "context0",
        "finishes",
        "join_computed0",
        "join_steps_left",
        "joins",
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
        joins: Sequence[Join] = (),
        join_computed0: Sequence[int] = (),
        join_steps_left: Sequence[int] = (),
    ) -> None:
        self.queue = queue
        self.max_steps = max_steps
        self.batch_size = len(computed0)
        self.computed0 = computed0
        self.context0 = sum(computed0)
        self.steps_left = steps_left
        self.finishes = finishes
        self.joins = list(joins)
        self.join_computed0 = list(join_computed0)
        self.join_steps_left = list(join_steps_left)

    def can_end_at(self, k: int) -> bool:
        """Whether :meth:`apply` may take ``k`` iterations: ``1 <= k <= max_steps`` and
        iteration ``k`` admits no request."""
        return 1 <= k <= self.max_steps and all(j.iteration != k for j in self.joins)

    def first_prefills(self) -> list[int] | None:
        """The prompt tokens each join of iteration 1 will compute:
        :func:`kvcore.stretch_joins.first_prefills`."""
        first = [j.request for j in self.joins if j.iteration == 1]
        return first_prefills(self.queue.scheduler, first, self.computed0, self.steps_left)

    def apply(self, k: int, sample_token_id: int) -> AsyncStretchResult:
        """Advance ``k`` iterations (:meth:`can_end_at`); see
        :class:`AsyncStretchResult` for what they did. The joins of iterations after
        ``k`` are left out (not added to the scheduler)."""
        assert self.can_end_at(k), "a stretch ends with a batch of decodes"
        queue = self.queue
        sched = queue.scheduler
        kvm = sched.kv_cache_manager
        managers = kvm.coordinator.single_type_managers
        njoin = sum(1 for j in self.joins if j.iteration <= k)
        joins = self.joins[:njoin]
        # Running order from each request's admission on: the running ones, then the joins.
        members = [*sched.running, *(j.request for j in joins)]
        computed0 = self.computed0 + self.join_computed0[:njoin]
        left = self.steps_left + self.join_steps_left[:njoin]
        # The iteration in which each request finishes, 0 for those that run on.
        ends = [f if f <= k else 0 for f in left]
        by_step = _by_iteration(ends)  # iteration -> its finishing requests' indices
        order = sorted(by_step)
        finished = [members[i] for f in order for i in by_step[f]]
        finished_in = [f for f in order for _ in by_step[f]]
        alloc, cache, held_before_last = self._block_events(k, ends, members, computed0)
        self._advance_tokens(k, ends, sample_token_id)
        finished_before = sched.finished_req_ids
        finished_ids: dict[int, set[str]] = {}  # iteration -> ids its output finished
        admits = _by_iteration([j.iteration for j in joins])  # iteration -> its joins
        stats1 = None if 1 in admits else kvm.make_prefix_cache_stats()
        join_stats: dict[int, PrefixCacheStats | None] = {}
        base = self.batch_size

        def run_step(j: int) -> None:
            block_events(managers, alloc.get(j, ()), cache.get(j, ()))
            admitted = admits.get(j)
            if admitted:
                for i in admitted:
                    admit(sched, joins[i].request, j, k, ends[base + i], sample_token_id)
                nonlocal stats1
                stats = kvm.make_prefix_cache_stats()  # this iteration's apply reports it
                if j == 1:
                    stats1 = stats
                else:
                    join_stats[j] = stats
            gone = by_step.get(j)
            if gone:
                for i in gone:  # its output's registration, then its free
                    kvm.cache_blocks(members[i], computed0[i] + j - 1)
                sched.finished_req_ids = set()  # the next schedule takes these
                ids = [members[i].request_id for i in gone]
                sched.finish_requests(ids, RequestStatus.FINISHED_LENGTH_CAPPED)
                finished_ids[j] = sched.finished_req_ids

        steps = alloc.keys() | cache.keys() | by_step.keys() | admits.keys()
        records = record_event_steps(kvm.block_pool, k, sorted(steps), run_step)
        # Iteration k's schedule took what iteration k - 1's output finished (before the
        # stretch: what the batch in flight's apply finishes); iteration k's own wait.
        sched.finished_req_ids = finished_ids.get(k, set())
        carried = finished_before if k == 1 else finished_ids.get(k - 1, set())
        sched.reset_preempted_req_ids = set()
        kvm.take_events()
        out = self._last_batch(held_before_last, carried)
        queue.replace_in_flight(k, out)
        return AsyncStretchResult(records, finished, out, stats1, finished_in, join_stats)

    def _block_events(
        self, k: int, ends: list[int], members: list[Request], computed0: list[int]
    ) -> tuple[
        dict[int, list[tuple[Request, int]]], dict[int, list[tuple[Request, int]]], dict[str, int]
    ]:
        """The schedule-time events of ``k`` iterations, keyed by iteration, in running
        order (``members``: the running requests, then the joins admitted by iteration
        ``k``; ``computed0`` theirs): allocations (request, slots) and prefix-cache
        registrations (request, tokens), a join's from the iteration after its admission
        (which makes its own); and the blocks each request still scheduled in iteration
        ``k`` holds before that iteration's schedule. ``ends``: the iteration each
        request finishes in (0: after the ``k``)."""
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
        base = self.batch_size
        for i, (req, c0, f) in enumerate(zip(members, computed0, ends)):
            rid = req.request_id
            last = f - 1 if f else k  # iterations that schedule it
            if i < base:
                first = 1
                held = len(req_to_blocks.get(rid) or ())
                cached_from = -(-c0 // bs)
            else:  # admitted in iteration first - 1 with its prompt's slots
                first = self.joins[i - base].iteration + 1
                prompt = c0 + first - 1
                held = prompt_blocks(prompt, la, mml, bs)
                cached_from = prompt // bs + 1  # its admission registered the prompt's
            # Iteration j (1-based) schedules token c0 + j - 1: slots for c0 + j + la.
            before_k = add_allocations(alloc, req, c0, held, last, k, la, mml, bs, first)
            if before_k >= 0:
                held_before_last[rid] = before_k
            if caching:
                # Iteration j registers the blocks the first c0 + j - 1 tokens fill.
                for q in range(cached_from, (c0 + last - 1) // bs + 1):
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


def _by_iteration(iterations: list[int]) -> dict[int, list[int]]:
    """The indices of ``iterations`` by iteration, each list in index order (0: none)."""
    out: dict[int, list[int]] = {}
    for i, f in enumerate(iterations):
        if f:
            out.setdefault(f, []).append(i)
    return out
