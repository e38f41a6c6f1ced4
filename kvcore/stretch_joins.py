"""Requests admitted inside an async decode stretch (:mod:`kvcore.fast_forward_async`):
which arriving requests a stretch can take where ``Scheduler.schedule`` would take them
(:func:`plan_joins`), their admission as ``schedule()`` makes it (:func:`admit`), and
the prompt tokens the first iteration's admissions will compute, known before they
happen (:func:`first_prefills`).

Mirrors nothing in vLLM: a shortcut whose results equal the batch queue's stepping with
the requests added before their iterations (tests/test_fast_forward_async.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from kvcore.kv_cache_block import UNKEYED
from kvcore.request import Request, RequestStatus
from kvcore.scheduler import Scheduler


class Join(NamedTuple):
    """A request admitted within a stretch: the schedule of iteration ``iteration``
    (1-based) takes it from the waiting queue with its whole prompt, after the running
    requests' decodes, as ``Scheduler.schedule`` takes a waiting request; from the next
    iteration on it decodes with the others."""

    iteration: int
    request: Request
    """Not yet added to the scheduler (the stretch adds it when it admits it)."""


def prompt_blocks(prompt: int, la: int, mml: int, bs: int) -> int:
    """Blocks (per group) a request admitted with its whole ``prompt`` (tokens) holds
    after its admission: slots for the prompt and ``la`` lookahead tokens, at most
    ``mml`` (the model's length), ``bs`` tokens a block; its prefix hits among them."""
    return -(-min(prompt + la, mml) // bs)


def admissible(sched: Scheduler, req: Request) -> bool:
    """Whether ``req`` is a request a stretch admits (:class:`Join`): new, stopping only
    on length, without a LoRA adapter, reading the prefix cache, shorter than the
    model's length, and the scheduler's policy first-come-first-served."""
    return (
        req.status == RequestStatus.WAITING
        and req.num_computed_tokens == 0
        and not req.output_token_ids
        and not req.num_preemptions
        and not req.num_stale_output_tokens
        and not req.spec_token_ids
        and req.eos_token_id is None
        and not req.stop_token_ids
        and req.lora_request is None
        and not req.skip_reading_prefix_cache
        and req.max_tokens >= 1
        and req.num_tokens < sched.max_model_len
        and sched.policy == "fcfs"
    )


def plan_joins(
    sched: Scheduler, steps_left: list[int], joins: Sequence[Join], horizon: int
) -> tuple[list[Join], list[int], list[int], int]:
    """The joins a stretch can take, each as the first of its iteration's admissions
    that the scheduler's limits would also let through (the token budget after the
    running decodes, whole prompts: no chunk; the running-request cap; the long-prefill
    threshold), their ``join_computed0`` and ``join_steps_left``, and the most
    iterations the stretch may take because of them: it ends before the first join it
    cannot take (the joins after it are left out)."""
    mml = sched.max_model_len
    budget = sched.max_num_scheduled_tokens
    threshold = sched.scheduler_config.long_prefill_token_threshold
    taken: list[Join] = []
    computed0: list[int] = []
    left: list[int] = []
    limit = horizon
    for join in joins:
        j, req = join.iteration, join.request
        prompt = req.num_tokens
        # At iteration j's schedule: running (not finished before j); scheduled: those
        # that do not finish in j; then the joins before this one in j.
        before = [f for t, f in zip(taken, left) if t.iteration < j]
        same = [t.request.num_tokens for t in taken if t.iteration == j]
        running = sum(1 for f in steps_left if f >= j) + sum(1 for f in before if f >= j)
        running += len(same)
        scheduled = sum(1 for f in steps_left if f > j) + sum(1 for f in before if f > j)
        tokens_left = budget - scheduled - sum(same)
        if (
            j < 1
            or (taken and j < taken[-1].iteration)
            or not admissible(sched, req)
            or not running  # the engine is busy: the batch in flight is not empty
            or prompt > tokens_left
            or running >= sched.max_num_running_reqs
            or 0 < threshold < prompt
        ):
            limit = min(limit, j - 1)
            break
        taken.append(join)
        computed0.append(prompt - j)
        left.append(j + min(req.max_tokens, mml - prompt))
    return taken, computed0, left, limit


def first_prefills(
    sched: Scheduler, first: list[Request], computed0: list[int], steps_left: list[int]
) -> list[int] | None:
    """The prompt tokens each request of ``first`` (the joins of a stretch's iteration
    1, in order) will compute when admitted: its prompt less its prefix hits, known
    before the stretch is applied because nothing before its lookup can change those
    hits; None when something could: a block it would hit is free and among those the
    iteration's allocations before it may evict, the running requests' registrations
    in the iteration could extend its hits, or two of them share their first block (the
    first's registrations would). ``computed0``, ``steps_left``: the running requests'
    (:class:`kvcore.fast_forward_async.AsyncDecodeStretch`). The caller checks the
    admissions against it."""
    kvm = sched.kv_cache_manager
    if not kvm.enable_caching:
        return [r.num_tokens for r in first]
    coordinator = kvm.coordinator
    bs = coordinator.block_size
    la = sched.num_lookahead_tokens
    mml = sched.max_model_len
    ng = len(coordinator.single_type_managers)
    req_to_blocks = coordinator.single_type_managers[0].req_to_blocks
    # Blocks iteration 1 may take from the free queue's head before each lookup: the
    # decodes' new blocks, then each earlier join's whole prompt's.
    popped = 0
    registered: set[object] = set()  # block hashes iteration 1's decodes register
    for req, c0, f in zip(sched.running, computed0, steps_left):
        if f > 1:
            need = -(-min(c0 + 1 + la, mml) // bs)
            popped += max(0, need - len(req_to_blocks.get(req.request_id) or ()))
        if c0 % bs == 0 and c0:  # its block filled by the token in flight
            registered.add(req.block_hashes[c0 // bs - 1])
    registered.discard(UNKEYED)  # an unshared request's: no other request looks it up
    popped *= ng
    prefills: list[int] = []
    firsts: set[object] = set()
    head = kvm.block_pool.free_block_queue.fake_free_list_head
    for req in first:
        hashes = req.block_hashes
        if hashes and hashes[0] != UNKEYED:  # no two requests share an unkeyed hash
            if hashes[0] in firsts:
                return None
            firsts.add(hashes[0])
        blocks, hits = kvm.get_computed_blocks(req)
        if hits // bs < len(hashes) and hashes[hits // bs] in registered:
            return None
        free_hits = {b.block_id for group in blocks.blocks for b in group if b.ref_cnt == 0}
        if free_hits:
            block = head.next_free_block
            for _ in range(popped):
                if block is None or block.block_id in free_hits:
                    return None
                block = block.next_free_block
        prefills.append(req.num_tokens - hits)
        popped += ng * prompt_blocks(req.num_tokens, la, mml, bs)
    return prefills


def admit(sched: Scheduler, req: Request, j: int, k: int, end: int, sample_token_id: int) -> None:
    """Admit ``req`` in iteration ``j``'s schedule as ``Scheduler.schedule`` takes a
    waiting request with its whole prompt (prefix lookup, slots, registration,
    statistics, then the async scheduler's placeholder), then give it the tokens
    and counters of the stretch's ``k`` iterations (``end``: the iteration it
    finishes in, 0 if after). Its later block events are the stretch's."""
    kvm = sched.kv_cache_manager
    sched.add_request(req)
    blocks, hits = kvm.get_computed_blocks(req)
    n = req.num_tokens - hits
    new_blocks = kvm.allocate_slots(
        req,
        n,
        num_new_computed_tokens=hits,
        new_computed_blocks=blocks,
        num_lookahead_tokens=sched.num_lookahead_tokens,
        full_sequence_must_fit=sched.scheduler_config.scheduler_reserve_full_isl,
        has_scheduled_reqs=bool(sched.running),
    )
    assert new_blocks is not None, "the stretch's plan covers every admission"
    kvm.record_prefix_cache_stats(req, hits)
    if req.num_cached_tokens < 0:
        req.num_cached_tokens = hits
    sched.waiting.pop_request()
    sched.running.append(req)
    req.status = RequestStatus.RUNNING
    # Its tokens after the admission, as the iterations up to k leave them: one
    # sampled per iteration from j + 1 on, the last scheduled one in flight.
    prompt = req.num_tokens
    last = end if end else k
    req.append_output_token_ids([sample_token_id] * (last - j))
    req.is_prefill_chunk = False
    if end:
        req.num_computed_tokens = prompt + end - 1 - j
        req.num_in_flight_tokens = 0
        req.num_output_placeholders = 0
    else:
        req.num_computed_tokens = prompt + k - j
        req.num_in_flight_tokens = 1
        req.num_output_placeholders = 1
