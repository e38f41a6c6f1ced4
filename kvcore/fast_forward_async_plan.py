"""Planning an exact fast-forward of the async-scheduling loop
(:class:`kvcore.fast_forward_async.AsyncDecodeStretch`): whether the batch in flight
and the running requests form a steady decode, and how many iterations the stretch may
take, with the requests it admits on the way (:mod:`kvcore.stretch_joins`).

Mirrors nothing in vLLM: see :mod:`kvcore.fast_forward_async`.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvcore.batch_queue import BatchQueue
from kvcore.fast_forward_async import AsyncDecodeStretch
from kvcore.request import Request
from kvcore.single_type_kv_cache_manager import SingleTypeKVCacheManager
from kvcore.stretch_blocks import JoinBlocks, stretch_length, stretch_possible
from kvcore.stretch_joins import Join, plan_joins, prompt_blocks


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
    queue: BatchQueue,
    horizon: int,
    through_finishes: bool = False,
    joins: Sequence[Join] = (),
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

    ``joins`` (in iteration order; requests not yet added to the scheduler) are
    admitted in their iterations: the stretch ends before the first it cannot take
    exactly as ``schedule()`` would (a request that is not new, stops on EOS or a stop
    token, has a LoRA adapter or skips the prefix cache; a prompt over the token budget
    the running decodes leave, or over the long-prefill threshold; the running-request
    cap; a batch in flight with nothing in it; blocks for its whole prompt, no prefix
    hit counted, and the pool's watermark).
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
    taken, join_computed0, join_left, limit = plan_joins(sched, steps_left, joins, horizon)
    if limit < 1:
        return None
    la = sched.num_lookahead_tokens
    blocks = [
        JoinBlocks(t.iteration, c0, prompt_blocks(t.request.num_tokens, la, mml, bs), f)
        for t, c0, f in zip(taken, join_computed0, join_left)
    ]
    planned = stretch_length(
        sched,
        computed0,
        steps_left,
        limit,
        finish_lag=1,
        through_finishes=through_finishes,
        joins=blocks,
    )
    if planned is None:
        return None
    max_steps, finishes = planned
    return AsyncDecodeStretch(
        queue, max_steps, computed0, steps_left, finishes, taken, join_computed0, join_left
    )
