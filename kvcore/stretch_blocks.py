"""What both exact fast-forwards share (:mod:`kvcore.fast_forward` for the synchronous
loop, :mod:`kvcore.fast_forward_async` for the async one): whether a scheduler's state
admits a decode stretch, the stretch's block events (allocations at block boundaries,
prefix-cache registrations) through the managers' own operations, how many steps the
free blocks afford, and the per-step block counts the records need.

Mirrors nothing in vLLM: a shortcut whose results equal vLLM's step-by-step behaviour.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from kvcore.block_pool import BlockPool
from kvcore.request import Request
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
    first: int = 1,
) -> int:
    """Add to ``alloc[j]`` the allocation ``(req, slots)`` of each step ``j`` in
    ``first .. last`` whose slots cross into a block ``req`` does not hold yet: step
    ``j`` schedules token ``c0 + j - 1`` and needs ``min(c0 + j + la, mml)`` slots
    (``la`` lookahead tokens, ``mml`` the model's length, ``bs`` tokens a block); ``req``
    holds ``held`` blocks before step ``first``. Returns the blocks it holds before step
    ``k``'s allocation when step ``k`` allocates, else -1."""
    before_k = -1
    j = first
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
    if len(managers) == 1:  # one pop from the pool for the step
        pairs = [(r.request_id, n) for r, n in allocs]
        if pairs:
            managers[0].allocate_new_blocks_in_turn(pairs)
    else:
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


class JoinBlocks(NamedTuple):
    """A request admitted within a stretch, as its block count sees it (see
    :func:`stretch_length`)."""

    step: int
    """The step whose schedule admits it (1-based)."""
    c0: int
    """Its computed tokens as a running request's before step 1 would be: each later
    step ``j`` schedules its token ``c0 + j - 1``."""
    held: int
    """Blocks (per group) its admission leaves it at most (none of them a prefix hit)."""
    steps_left: int
    """The step it finishes in."""


def stretch_length(
    scheduler: Scheduler,
    computed0: list[int],
    steps_left: list[int],
    horizon: int,
    finish_lag: int,
    through_finishes: bool = False,
    joins: Sequence[JoinBlocks] = (),
) -> tuple[int, bool] | None:
    """How many steps a decode stretch of the running requests may take (at most
    ``horizon``) and whether a request finishes within them; None when the free blocks
    do not cover even one step. The stretch ends with the first step in which requests
    finish (then the only one they can finish in), or, ``through_finishes``, goes on
    with the requests left, at most until the last finishes.

    Running request ``i`` has ``computed0[i]`` tokens computed and finishes in step
    ``steps_left[i]``; in step ``j`` it needs slots for ``computed0[i] + j`` tokens
    (plus lookahead, capped at ``max_model_len``), through step ``steps_left[i] -
    finish_lag`` (the async loop does not schedule a request in the iteration whose
    output finishes it: 1; the synchronous loop: 0). Blocks freed by requests that
    finish within the stretch are not counted on (they join the free queue's tail).

    ``joins``: requests admitted within the stretch (the async loop's), each counted
    from its step on with the blocks its admission takes (at most ``held``, prefix hits
    unknown before then) and its decodes after it; each admission also leaves the
    pool's watermark free, as ``allocate_slots`` demands of a waiting request: the
    stretch ends before one the free blocks would not cover so."""
    finishes = steps_left + [j.steps_left for j in joins]
    first_finish = min(horizon + 1, min(finishes))
    if through_finishes:
        max_steps = min(horizon, max(finishes))
    else:
        max_steps = min(horizon, first_finish)
    kvm = scheduler.kv_cache_manager
    managers = kvm.coordinator.single_type_managers
    bs = kvm.coordinator.block_size
    la = scheduler.num_lookahead_tokens
    mml = scheduler.max_model_len
    req_to_blocks = managers[0].req_to_blocks
    held = [len(req_to_blocks.get(r.request_id) or ()) for r in scheduler.running]
    free = kvm.block_pool.free_block_queue.num_free_blocks
    ng = len(managers)

    def needed(s: int) -> int:
        """New blocks (all groups) the first ``s`` steps allocate."""
        total = 0
        for c, h, f in zip(computed0, held, steps_left):
            extra = -(-min(c + min(s, f - finish_lag) + la, mml) // bs) - h
            if extra > 0:
                total += extra
        for join in joins:
            if join.step <= s:
                last = min(s, join.steps_left - finish_lag)
                total += max(join.held, -(-min(join.c0 + last + la, mml) // bs))
        return total * ng

    affordable = affordable_steps(needed, max_steps, free)
    # The first join (in step order) whose admission would leave less than the
    # watermark free: needed() grows with the step, so bisect over the joins.
    limit = free - scheduler.kv_cache_manager.watermark_blocks
    lo, hi = 0, bisect_right([j.step for j in joins], affordable)
    while lo < hi:
        mid = (lo + hi) // 2
        if needed(joins[mid].step) > limit:
            hi = mid
        else:
            lo = mid + 1
    if lo < len(joins) and joins[lo].step <= affordable:
        affordable = joins[lo].step - 1
    if not affordable:
        return None
    return affordable, first_finish <= affordable
