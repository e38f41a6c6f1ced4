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

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from kvcore.block_pool import BlockPool
from kvcore.request import Request, RequestStatus
from kvcore.scheduler import Scheduler
from kvcore.single_type_kv_cache_manager import FullAttentionManager, SingleTypeKVCacheManager


class StretchRecords(NamedTuple):
    """Per-step state after each fast-forwarded step (lists of length ``k``)."""

    num_free_blocks: list[int]
    num_cached_blocks: list[int]
    num_cached_free_blocks: list[int]


def record_event_steps(
    pool: BlockPool, k: int, event_steps: list[int], run_step: Callable[[int], None]
) -> StretchRecords:
    """Per-step block counts of ``k`` steps in which only ``event_steps`` (sorted,
    1-based) change the pool: ``run_step(j)`` performs step ``j``'s changes; the counts
    of every other step are those of the step before it."""
    free_queue = pool.free_block_queue
    cur_free = free_queue.num_free_blocks
    cur_cached = pool.num_cached_blocks
    cur_cached_free = pool.num_cached_free_blocks
    if not event_steps:
        return StretchRecords([cur_free] * k, [cur_cached] * k, [cur_cached_free] * k)
    free: list[int] = []
    cached: list[int] = []
    cached_free: list[int] = []
    done = 0  # steps whose counts are recorded
    for j in event_steps:
        if j - 1 > done:  # steps without events keep the counts
            gap = j - 1 - done
            free += [cur_free] * gap
            cached += [cur_cached] * gap
            cached_free += [cur_cached_free] * gap
        run_step(j)
        cur_free = free_queue.num_free_blocks
        cur_cached = pool.num_cached_blocks
        cur_cached_free = pool.num_cached_free_blocks
        free.append(cur_free)
        cached.append(cur_cached)
        cached_free.append(cur_cached_free)
        done = j
    if done < k:
        gap = k - done
        free += [cur_free] * gap
        cached += [cur_cached] * gap
        cached_free += [cur_cached_free] * gap
    return StretchRecords(free, cached, cached_free)


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


def add_allocations(
    alloc: dict[int, list[tuple[Request, int]]],
    req: Request,
    c0: int,
    held: int,
    last: int,
    k: int,
    la: int,
    mml: int,
    bs: int,
) -> int:
    """Add to ``alloc[j]`` the allocation ``(req, slots)`` of each step ``j`` in
    ``1 .. last`` whose slots cross into a block ``req`` does not hold yet: step ``j``
    schedules token ``c0 + j - 1`` and needs ``min(c0 + j + la, mml)`` slots (``la``
    lookahead tokens, ``mml`` the model's length, ``bs`` tokens a block); ``req`` holds
    ``held`` blocks before step 1. Returns the blocks it holds before step ``k``'s
    allocation when step ``k`` allocates, else -1."""
    before_k = -1
    j = 1
    while j <= last:
        slots = min(c0 + j + la, mml)
        required = -(-slots // bs)
        if required > held:
            if j == k:
                before_k = held
            alloc.setdefault(j, []).append((req, slots))
            held = required
            j += 1
            continue
        # Jump to the next step whose slot count crosses a block boundary.
        j = max(j + 1, held * bs - la - c0 + 1)
    return before_k


def block_events(
    managers: Sequence[SingleTypeKVCacheManager],
    allocs: Iterable[tuple[Request, int]],
    caches: Iterable[tuple[Request, int]],
) -> None:
    """One step's block events through the managers, as ``allocate_slots`` makes them
    for a decode: the allocations ``(request, slots)``, then the prefix-cache
    registrations ``(request, tokens)``, each in the order given, then group order."""
    for req, slots in allocs:
        for m in managers:
            m.allocate_new_blocks(req.request_id, slots)
    for req, num_tokens in caches:
        for m in managers:
            m.cache_blocks(req, num_tokens)


def affordable_steps(needed: Callable[[int], int], max_steps: int, free: int) -> int:
    """The most steps ``s <= max_steps`` whose new blocks the ``free`` blocks cover:
    ``needed(s)`` (all groups) grows with ``s`` and ``needed(0)`` is 0. Bisection:
    a few ``needed`` calls for a stretch of thousands of steps."""
    if needed(max_steps) <= free:
        return max_steps
    lo, hi = 0, max_steps  # needed(lo) <= free < needed(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if needed(mid) <= free:
            lo = mid
        else:
            hi = mid
    return lo


def stretch_possible(scheduler: Scheduler) -> bool:
    """Whether the scheduler's state admits a decode stretch at all (either loop):
    requests run and none waits, every KV cache group is full attention, KV events are
    off, speculative decoding is off (its drafts' acceptance varies step by step), no
    KV connector is set (its hooks run every step), and the token budget covers one
    token per running request."""
    running = scheduler.running
    if not running or scheduler.waiting or scheduler.num_spec_tokens:
        return False
    if scheduler.connector is not None:
        return False
    kvm = scheduler.kv_cache_manager
    if (
        kvm.full_attention_managers is None
        or kvm.block_pool.enable_kv_cache_events
        or len(running) > scheduler.max_num_scheduled_tokens
    ):
        return False
    return all(type(m) is FullAttentionManager for m in kvm.coordinator.single_type_managers)


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
    kvm = scheduler.kv_cache_manager
    managers = kvm.coordinator.single_type_managers
    mml = scheduler.max_model_len
    first_finish = horizon + 1
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
        if f < first_finish:
            first_finish = f
    finishes = first_finish <= horizon
    max_steps = first_finish if finishes else horizon
    # Blocks: cumulative new blocks (per group) must stay within the free count.
    bs = kvm.coordinator.block_size
    la = scheduler.num_lookahead_tokens
    req_to_blocks = managers[0].req_to_blocks
    held = [len(req_to_blocks.get(r.request_id) or ()) for r in running]
    free = kvm.block_pool.free_block_queue.num_free_blocks
    ng = len(managers)

    def needed(s: int) -> int:
        """New blocks (all groups) the first ``s`` steps allocate."""
        total = 0
        for c, h in zip(computed0, held):
            extra = -(-min(c + s + la, mml) // bs) - h
            if extra > 0:
                total += extra
        return total * ng

    affordable = affordable_steps(needed, max_steps, free)
    if affordable < max_steps:
        if not affordable:
            return None
        max_steps, finishes = affordable, False
    return DecodeStretch(scheduler, max_steps, computed0, steps_left, finishes)
