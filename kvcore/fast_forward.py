"""Exact fast-forward over decode-only steps.

When every running request only decodes (one token per step), nothing waits and no
request needs a block the pool cannot give, consecutive ``schedule()`` /
``update_from_output()`` pairs change nothing but token counts, block tables at block
boundaries and prefix-cache registrations of newly full blocks, until a step in which
requests finish. :func:`plan_decode_stretch` says how many such steps can pass (the
last may be the first step in which requests finish); :meth:`DecodeStretch.apply`
performs ``k`` of them at once, in exactly the order step-by-step scheduling would:
block allocations in (step, running order, group) order from the free-queue head, each
newly full block registered with its hash at the step whose scheduled token fills it,
and, when step ``k`` is the finishing step, the finished requests freed in running
order after that step's allocations, as ``update_from_output`` frees them.

Tokens, blocks and frees go through kvcore's own operations, as the steps would make
them: ``Request.append_output_token_ids`` (tokens and block hashes), the managers'
``allocate_new_blocks`` and ``cache_blocks``, and ``Scheduler.finish_requests`` for the
length cap's frees. What it sets itself are public counters: each request's
``num_computed_tokens`` and the scheduler's per-step id sets, as ``schedule()`` and
``update_from_output`` leave them.

Scope: full-attention groups only, KV events off, no speculative drafts. Everything
else returns ``None`` (the caller steps normally). Mirrors nothing in vLLM: it is a
shortcut whose results equal vLLM's step-by-step behaviour (see the tests).
"""

from __future__ import annotations

from kvcore.request import Request, RequestStatus
from kvcore.scheduler import Scheduler
from kvcore.stretch_blocks import (
    StretchRecords,
    add_allocations,
    block_events,
    record_event_steps,
    stretch_length,
    stretch_possible,
)


class DecodeStretch:
    """Up to ``max_steps`` decode-only steps that may be applied at once.

    ``context0`` is the total number of tokens already in the KV cache of all running
    requests at the start of the first step; step ``j`` (0-based) starts with
    ``context0 + j * batch_size``; ``batch_size`` is constant.
    When ``finishes`` is true, step ``max_steps`` is the first step in which requests
    finish (those whose ``steps_left`` equals ``max_steps``); else no request finishes
    within the stretch.
    """

    __slots__ = (
        "batch_size",
        "computed0",
        "context0",
        "finishes",
        "max_steps",
        "scheduler",
        "steps_left",
    )

    def __init__(
        self,
        scheduler: Scheduler,
        max_steps: int,
        computed0: list[int],
        steps_left: list[int],
        finishes: bool,
    ) -> None:
        self.scheduler = scheduler
        self.max_steps = max_steps
        self.batch_size = len(scheduler.running)
        self.computed0 = computed0
        self.context0 = sum(computed0)
        self.steps_left = steps_left
        self.finishes = finishes

    def apply(self, k: int, sample_token_id: int) -> tuple[StretchRecords, list[Request]]:
        """Advance ``k`` (1 <= k <= max_steps) steps.

        Returns the per-step block counts (after each step's frees) and the requests
        that finished in step ``k`` (empty unless ``k == max_steps`` and ``finishes``),
        in running order, freed and removed from ``running`` as step-by-step would.
        """
        assert 1 <= k <= self.max_steps
        sched = self.scheduler
        kvm = sched.kv_cache_manager
        pool = kvm.block_pool
        managers = kvm.coordinator.single_type_managers
        req_to_blocks = managers[0].req_to_blocks
        bs = kvm.coordinator.block_size
        la = sched.num_lookahead_tokens
        mml = sched.max_model_len
        running = sched.running
        caching = kvm.enable_caching
        # Allocation and caching events, keyed by step, in running order: allocations
        # (request, slots) and prefix-cache registrations (request, tokens).
        alloc: dict[int, list[tuple[Request, int]]] = {}
        cache: dict[int, list[tuple[Request, int]]] = {}
        for req, c0 in zip(running, self.computed0):
            held = len(req_to_blocks.get(req.request_id) or ())
            add_allocations(alloc, req, c0, held, k, k, la, mml, bs)
            if caching:
                # Block b (0-based) is registered when c0 + j == (b + 1) * bs.
                first_block = (c0 + 1 + bs - 1) // bs
                for b in range(max(first_block, 1) - 1, (c0 + k) // bs):
                    j = (b + 1) * bs - c0
                    if 1 <= j <= k:
                        cache.setdefault(j, []).append((req, (b + 1) * bs))
        # Tokens first (hashes must exist before caching); then allocations and caching
        # in step order, through the managers (running order, then group order; caching
        # touches only held blocks, allocation only free ones).
        tokens = [sample_token_id] * k
        for req in running:
            req.append_output_token_ids(tokens)
            req.num_computed_tokens += k
        finished: list[Request] = []
        if self.finishes and k == self.max_steps:
            finished = [r for r, left in zip(running, self.steps_left) if left == k]
        sched.finished_req_ids = set()
        event_steps = sorted(alloc.keys() | cache.keys() | ({k} if finished else set()))

        def run_step(j: int) -> None:
            block_events(managers, alloc.get(j, ()), cache.get(j, ()))
            if j == k and finished:  # the length cap's frees, in running order
                ids = [r.request_id for r in finished]
                sched.finish_requests(ids, RequestStatus.FINISHED_LENGTH_CAPPED)

        records = record_event_steps(pool, k, event_steps, run_step)
        sched.reset_preempted_req_ids = set()
        kvm.make_prefix_cache_stats()
        return records, finished


def plan_decode_stretch(scheduler: Scheduler, horizon: int) -> DecodeStretch | None:
    """The longest decode-only stretch (at most ``horizon`` steps) starting now, or None.

    Eligible when nothing waits, every running request has its whole sequence computed
    but the last sampled token and stops only on length (no EOS or stop tokens), all
    groups are full attention, KV events are off, and the token budget covers one
    token per request. The stretch ends with the first step in which a request
    finishes (``finishes``), or before the first step whose allocations the free
    blocks would not cover. Pure Python: batches are small where stretches matter.
    """
    if not stretch_possible(scheduler):
        return None
    running = scheduler.running
    mml = scheduler.max_model_len
    computed0 = []
    steps_left = []
    for req in running:
        c = req.num_computed_tokens
        if (
            c != req.num_tokens - 1
            or req.spec_token_ids
            or req.num_output_placeholders
            or req.is_prefill_chunk
            or req.eos_token_id is not None
            or req.stop_token_ids
        ):
            return None
        computed0.append(c)
        # Finishes at step f (after sampling): outputs reach max_tokens or length mml.
        f = min(req.max_tokens - req.num_output_tokens, mml - c - 1)
        if f < 1:
            return None
        steps_left.append(f)
    planned = stretch_length(scheduler, computed0, steps_left, horizon, finish_lag=0)
    if planned is None:
        return None
    max_steps, finishes = planned
    return DecodeStretch(scheduler, max_steps, computed0, steps_left, finishes)
