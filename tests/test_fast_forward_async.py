"""Exact fast-forward of the async-scheduling loop (:mod:`kvcore.fast_forward_async`).

:func:`plan_async_decode_stretch`'s stopping rules (the first iteration in which a
request finishes, by ``max_tokens`` or ``max_model_len``; the last iteration whose
blocks the pool covers; nothing unless one steady decode batch is in flight) and
:meth:`AsyncDecodeStretch.apply` against the batch queue stepped one iteration at a
time: the same scheduler, KV cache, prefix cache and batch in flight afterwards, the
same block counts after every iteration. The engine-level equivalence (records byte
for byte) is tests/test_fast_forward.py's.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvcore.async_scheduler import AsyncScheduler
from kvcore.batch_queue import BatchQueue, sample_fixed_token
from kvcore.block_hashing import BlockHasher
from kvcore.fast_forward_async_plan import plan_async_decode_stretch
from kvcore.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from kvcore.request import LoRARequest, Request
from kvcore.scheduler_config import SchedulerConfig
from kvcore.stretch_joins import Join
from sim.engine.replica import SAMPLE_TOKEN_ID

BLOCK = 16


def _queue(
    num_blocks: int,
    max_model_len: int = 4096,
    caching: bool = True,
    budget: int = 4096,
    lookahead: int = 0,
) -> BatchQueue:
    config = KVCacheConfig(
        num_blocks, [], [KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=BLOCK))]
    )
    sched = AsyncScheduler(
        SchedulerConfig(
            max_model_len=max_model_len,
            max_num_batched_tokens=budget,
            max_num_seqs=min(64, budget),
            num_lookahead_tokens=lookahead,
        ),
        config,
        enable_caching=caching,
    )
    return BatchQueue(sched, sample_fixed_token(SAMPLE_TOKEN_ID))


def _add(
    queue: BatchQueue, rid: str, prompt: int, max_tokens: int, seed: int = 0, **kw: Any
) -> None:
    ids = [1000 + seed * 1000 + i for i in range(prompt)]
    hasher = BlockHasher.from_name(BLOCK)
    queue.scheduler.add_request(Request(rid, ids, max_tokens, block_hasher=hasher, **kw))


def _warm(queue: BatchQueue) -> None:
    """Two iterations: the prompts are scheduled, then the first decode is scheduled
    and the prompts' output applied; a decode of every request is in flight."""
    queue.step()
    queue.step()


def _counts(queue: BatchQueue) -> tuple[int, int, int]:
    pool = queue.scheduler.kv_cache_manager.block_pool
    return pool.get_num_free_blocks(), pool.num_cached_blocks, pool.num_cached_free_blocks


def _state(queue: BatchQueue) -> tuple:
    """Everything the next iterations (and the records) can see."""
    sched = queue.scheduler
    kvm = sched.kv_cache_manager
    pool = kvm.block_pool
    manager = kvm.coordinator.single_type_managers[0]
    reqs = {
        rid: (
            r.status,
            r.num_computed_tokens,
            r.num_tokens,
            r.num_output_placeholders,
            r.num_in_flight_tokens,
            r.is_prefill_chunk,
            list(r.output_token_ids),
            list(r.block_hashes),
            kvm.get_block_ids(rid),
            manager.num_cached_block.get(rid, 0),
        )
        for rid, r in sched.requests.items()
    }
    (batch,) = queue.queue
    out = batch.scheduler_output
    in_flight = (
        batch.step,
        list(out.num_scheduled_tokens.items()),
        out.total_num_scheduled_tokens,
        out.scheduled_running_reqs,
        {rid: b.get_block_ids() for rid, b in out.req_to_new_blocks.items()},
        sorted(out.preempted_req_ids),
        sorted(out.finished_req_ids),
        {rid: list(t) for rid, t in batch.sampled_token_ids.items()},
    )
    return (
        [r.request_id for r in sched.running],
        len(sched.waiting),
        reqs,
        sorted(sched.finished_req_ids),
        [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
        _counts(queue),
        {
            h: [b.block_id for b in (e.values() if isinstance(e, dict) else (e,))]
            for h, e in pool.cached_block_hash_to_block.items()
        },
        in_flight,
        queue.iteration,
    )


def _step_iterations(
    queue: BatchQueue, k: int
) -> tuple[list[tuple[int, int, int]], list[str], list[tuple[str, int]]]:
    """``k`` iterations one by one: block counts after each, ids finished in the last,
    and every finished id with the iteration (1-based) it finished in."""
    counts = []
    finished: list[str] = []
    every: list[tuple[str, int]] = []
    for j in range(1, k + 1):
        result = queue.step()
        assert result.applied is not None and result.output is not None
        assert not result.applied.scheduler_output.preempted_req_ids
        counts.append(_counts(queue))
        finished = result.output.finished_req_ids
        every += [(rid, j) for rid in finished]
    return counts, finished, every


def test_async_plan_ends_with_the_first_finish() -> None:
    """After the first token, b has 9 tokens left: the iteration that applies its last
    one ends the stretch; it is not in the batch that iteration schedules."""
    queue = _queue(200)
    _add(queue, "a", 40, 30)
    _add(queue, "b", 20, 10, seed=1)
    _warm(queue)
    plan = plan_async_decode_stretch(queue, 1000)
    assert plan is not None
    assert plan.max_steps == 9 and plan.finishes and plan.batch_size == 2
    short = plan_async_decode_stretch(queue, 5)
    assert short is not None and short.max_steps == 5 and not short.finishes
    # Fewer iterations than planned finish nothing.
    _records, finished, out, _stats, _in, _joins = plan.apply(8, SAMPLE_TOKEN_ID)
    assert finished == [] and list(out.num_scheduled_tokens) == ["a", "b"]
    last = plan_async_decode_stretch(queue, 1000)
    assert last is not None and last.max_steps == 1 and last.finishes
    _records, finished, out, _stats, _in, _joins = last.apply(1, SAMPLE_TOKEN_ID)
    assert [r.request_id for r in finished] == ["b"]
    assert list(out.num_scheduled_tokens) == ["a"]
    assert [r.request_id for r in queue.scheduler.running] == ["a"]


def test_async_plan_stops_at_max_model_len() -> None:
    """A request whose length reaches max_model_len finishes in the iteration that
    applies that token; stepping agrees."""
    queue = _queue(200, max_model_len=64)
    _add(queue, "a", 50, 100)
    _warm(queue)  # 51 tokens (one output), the second output in flight
    plan = plan_async_decode_stretch(queue, 1000)
    assert plan is not None and plan.max_steps == 64 - 51 and plan.finishes
    _counts_, finished, _every = _step_iterations(queue, 12)
    assert finished == []
    _counts_, finished, _every = _step_iterations(queue, 1)
    assert finished == ["a"]


def test_async_plan_stops_before_an_unservable_block() -> None:
    """The stretch ends before the first iteration whose allocation the free blocks
    cannot cover; stepping that iteration preempts."""
    queue = _queue(5)  # 4 usable blocks
    _add(queue, "a", 46, 100)  # 46 + 1 in flight: 3 blocks; 49 slots need a fourth
    _add(queue, "b", 1, 100, seed=1)
    _warm(queue)
    assert queue.scheduler.kv_cache_manager.block_pool.get_num_free_blocks() == 0
    plan = plan_async_decode_stretch(queue, 1000)
    assert plan is not None and plan.max_steps == 1 and not plan.finishes
    queue.step()
    assert plan_async_decode_stretch(queue, 1000) is None
    result = queue.step()
    assert result.scheduled is not None and result.scheduled.scheduler_output.preempted_req_ids

    tight = _queue(5)
    _add(tight, "a", 47, 100)
    _add(tight, "b", 1, 100, seed=1)
    _warm(tight)
    assert plan_async_decode_stretch(tight, 1000) is None


def test_async_plan_nothing_unless_every_request_samples_in_the_batch_in_flight() -> None:
    """Nothing is planned while a request waits, while a prompt chunk that samples
    nothing is in flight, with two batches in flight (mid-iteration), or for a request
    that may stop on EOS; a batch in flight that completes prompts is a start."""
    queue = _queue(200)
    _add(queue, "a", 40, 30)
    assert plan_async_decode_stretch(queue, 100) is None  # only waiting
    queue.step()
    assert plan_async_decode_stretch(queue, 100) is not None  # a's prompt in flight
    queue.step()
    assert plan_async_decode_stretch(queue, 100) is not None
    queue.schedule_next()
    assert plan_async_decode_stretch(queue, 100) is None  # two batches in flight
    queue.apply_oldest()
    assert plan_async_decode_stretch(queue, 100) is not None
    _add(queue, "b", 10, 30, seed=1)
    assert plan_async_decode_stretch(queue, 100) is None  # b waits
    queue.step()
    assert plan_async_decode_stretch(queue, 100) is not None  # b's prompt in flight

    chunked = _queue(200, budget=16)
    _add(chunked, "a", 40, 30)
    chunked.step()
    assert plan_async_decode_stretch(chunked, 100) is None  # 16 of 40 prompt tokens
    chunked.step()
    assert plan_async_decode_stretch(chunked, 100) is None  # a chunk, a's sample none
    chunked.step()
    assert plan_async_decode_stretch(chunked, 100) is not None  # the last 8 tokens

    eos = _queue(200)
    _add(eos, "a", 40, 30, eos_token_id=2)
    _warm(eos)
    assert plan_async_decode_stretch(eos, 100) is None


SCENARIOS = {
    # name: (blocks, max_model_len, caching, [(id, prompt, max_tokens, seed)]); a
    # request whose id ends in "+" arrives after the others' first decode was scheduled
    # (its prompt and their decode in flight when the stretches start).
    "two": (100, 4096, True, [("a", 30, 80, 0), ("b", 17, 80, 1)]),
    "prompts-in-flight": (100, 4096, True, [("a", 30, 80, 0), ("b", 17, 80, 1), ("c+", 50, 9, 2)]),
    "shared-in-flight": (60, 4096, True, [("a", 33, 40, 0), ("b+", 33, 20, 0), ("c+", 1, 3, 0)]),
    "finish": (40, 4096, True, [("a", 30, 25, 0), ("b", 17, 12, 1), ("c", 40, 12, 2)]),
    # Identical prompts: identical block hashes, registered by several requests.
    "shared": (60, 4096, True, [("a", 33, 40, 0), ("b", 33, 20, 0), ("c", 32, 20, 0)]),
    "no-caching": (60, 4096, False, [("a", 33, 40, 0), ("b", 15, 20, 1)]),
    "last-token-in-flight": (60, 4096, True, [("a", 31, 2, 0), ("b", 15, 40, 1)]),
    "all-finish": (60, 4096, True, [("a", 31, 12, 0), ("b", 15, 12, 1)]),
    "max-model-len": (60, 64, True, [("a", 47, 100, 0), ("b", 10, 100, 1)]),
    "tight": (8, 4096, True, [("a", 40, 100, 0), ("b", 20, 100, 1)]),
    "lookahead": (60, 4096, True, [("a", 30, 40, 0), ("b", 13, 30, 1)]),
    "lookahead-tight": (9, 4096, True, [("a", 40, 100, 0), ("b", 20, 100, 1)]),
    "lookahead-max-model-len": (60, 64, True, [("a", 47, 100, 0), ("b", 10, 100, 1)]),
}
LOOKAHEAD = {"lookahead": 3, "lookahead-tight": 5, "lookahead-max-model-len": 4}
"""Speculative slots reserved per request per step, where not 0."""


@pytest.mark.parametrize("through", [False, True])
@pytest.mark.parametrize("name", SCENARIOS)
def test_async_apply_equals_stepping(name: str, through: bool) -> None:
    """Each planned stretch, applied at once, leaves the scheduler, the KV and prefix
    caches and the batch in flight exactly as stepping its iterations one by one does,
    with the same block counts after every iteration and the same requests finished
    in the same iterations; stretches follow one another until none can be planned.
    ``through``: stretches planned through the iterations in which requests finish."""
    blocks, max_model_len, caching, requests = SCENARIOS[name]
    queues = []
    for _ in range(2):
        queue = _queue(blocks, max_model_len, caching, lookahead=LOOKAHEAD.get(name, 0))
        for rid, prompt, max_tokens, seed in requests:
            if not rid.endswith("+"):
                _add(queue, rid, prompt, max_tokens, seed)
        _warm(queue)
        late = [r for r in requests if r[0].endswith("+")]
        for rid, prompt, max_tokens, seed in late:
            _add(queue, rid, prompt, max_tokens, seed)
        if late:  # their prompts scheduled, the first decode of the others applied
            queue.step()
        queues.append(queue)
    ff, ref = queues
    stretches = 0
    past_a_finish = False
    while (plan := plan_async_decode_stretch(ff, 7, through)) is not None:
        assert plan_async_decode_stretch(ref, 7, through) is not None
        result = plan.apply(plan.max_steps, SAMPLE_TOKEN_ID)
        records, finished, finished_in = result.records, result.finished, result.finished_in
        counts, done, every = _step_iterations(ref, plan.max_steps)
        assert list(zip(*records)) == counts
        assert [(r.request_id, f) for r, f in zip(finished, finished_in)] == every
        if not through:
            assert [r.request_id for r in finished] == (done if plan.finishes else [])
        past_a_finish |= any(f < plan.max_steps for f in finished_in)
        assert _state(ff) == _state(ref)
        stretches += 1
    assert stretches >= 1 if through else stretches >= 2
    assert plan_async_decode_stretch(ref, 7, through) is None
    if through and name in ("finish", "last-token-in-flight"):
        assert past_a_finish  # a stretch went on after requests finished
    if name == "all-finish":  # an empty batch is in flight, as stepping leaves it
        assert not ff.scheduler.running and _state(ff)[7][2] == 0


def _request(rid: str, prompt: int, max_tokens: int, seed: int = 0) -> Request:
    """The request :func:`_add` adds, not added."""
    ids = [1000 + seed * 1000 + i for i in range(prompt)]
    return Request(rid, ids, max_tokens, block_hasher=BlockHasher.from_name(BLOCK))


JOIN_SCENARIOS = {
    # name: (blocks, max_model_len, caching, running [(id, prompt, max_tokens, seed)],
    #        joins [(iteration, id, prompt, max_tokens, seed)], queue keywords)
    "hit": (100, 4096, True, [("a", 30, 80, 0), ("b", 17, 80, 1)], [(3, "c", 30, 20, 0)], {}),
    "at-1": (100, 4096, True, [("a", 30, 80, 0), ("b", 17, 80, 1)], [(1, "c", 40, 20, 2)], {}),
    "finishes": (100, 4096, True, [("a", 30, 80, 0)], [(2, "c", 33, 3, 0)], {}),
    "same-iteration": (
        100,
        4096,
        True,
        [("a", 30, 80, 0), ("b", 17, 80, 1)],
        [(4, "c", 20, 30, 3), (4, "d", 20, 30, 3), (9, "e", 48, 10, 0)],
        {},
    ),
    # e shares c's prompt, admitted after c registered it.
    "hits-a-join": (
        100,
        4096,
        True,
        [("a", 30, 80, 0)],
        [(2, "c", 50, 30, 4), (6, "e", 50, 30, 4)],
        {},
    ),
    "after-a-finish": (
        100,
        4096,
        True,
        [("a", 30, 4, 0), ("b", 17, 60, 1)],
        [(7, "c", 30, 10, 0)],
        {},
    ),
    "lookahead": (100, 4096, True, [("a", 30, 40, 0)], [(3, "c", 31, 20, 5)], {"lookahead": 3}),
    "no-caching": (100, 4096, False, [("a", 30, 40, 0)], [(3, "c", 30, 20, 0)], {}),
    "max-model-len": (100, 64, True, [("a", 20, 100, 0)], [(2, "c", 40, 100, 1)], {}),
    # Few blocks: the running decodes' allocations evict cached free blocks first.
    "tight": (14, 4096, True, [("a", 30, 50, 0)], [(5, "c", 40, 8, 1)], {}),
    "watermark": (60, 4096, True, [("a", 30, 40, 0)], [(3, "c", 40, 8, 1)], {"watermark": 0.1}),
    # c comes in the iteration whose apply finishes a, the only one running.
    "as-the-last-finishes": (100, 4096, True, [("a", 30, 4, 0)], [(3, "c", 40, 10, 2)], {}),
    # The blocks run out while c decodes: the stretch ends before.
    "growth": (9, 4096, True, [("a", 30, 80, 0)], [(2, "c", 20, 60, 1)], {}),
}


def _join_queue(name: str) -> BatchQueue:
    blocks, max_model_len, caching, running, _, kw = JOIN_SCENARIOS[name]
    queue = _queue(blocks, max_model_len, caching, lookahead=kw.get("lookahead", 0))
    if "watermark" in kw:  # a pool that keeps a tenth of its blocks for running requests
        kvm = queue.scheduler.kv_cache_manager
        kvm.watermark_blocks = int(kw["watermark"] * blocks)
    for rid, prompt, max_tokens, seed in running:
        _add(queue, rid, prompt, max_tokens, seed)
    _warm(queue)
    return queue


def _stats(stats: Any) -> tuple[int, int]:
    return (0, 0) if stats is None else (stats.queries, stats.hits)


@pytest.mark.parametrize("horizon", [12, 40])
@pytest.mark.parametrize("name", JOIN_SCENARIOS)
def test_a_stretch_admits_arrivals_as_stepping_does(name: str, horizon: int) -> None:
    """A stretch that admits requests in its iterations leaves everything as stepping
    does with the requests added before those iterations: the same scheduler, caches
    and batch in flight, the same block counts after every iteration, the same requests
    finished in the same iterations and the same prefix-cache lookups reported by each
    iteration's apply. ``horizon``: the stretch ends with requests it admitted still
    running (12) or, mostly, after they finished (40)."""
    joins = JOIN_SCENARIOS[name][4]
    ff, ref = _join_queue(name), _join_queue(name)
    plan = plan_async_decode_stretch(
        ff, horizon, True, [Join(j, _request(rid, p, m, s)) for j, rid, p, m, s in joins]
    )
    assert plan is not None
    k = max(i for i in range(1, plan.max_steps + 1) if plan.can_end_at(i))
    assert k > max(j for j, *_ in joins if j <= k)  # it admitted someone
    result = plan.apply(k, SAMPLE_TOKEN_ID)
    counts, every, reported = [], [], []
    for j in range(1, k + 1):
        for jj, rid, p, m, s in joins:
            if jj == j:
                _add(ref, rid, p, m, s)
        step = ref.step()
        assert step.output is not None and step.applied is not None
        counts.append(_counts(ref))
        every += [(rid, j) for rid in step.output.finished_req_ids]
        reported.append(_stats(step.output.prefix_cache_stats))
    assert list(zip(*result.records)) == counts
    assert [(r.request_id, f) for r, f in zip(result.finished, result.finished_in)] == every
    got = [_stats(result.prefix_cache_stats)] + [
        _stats(result.join_stats.get(j)) for j in range(2, k + 1)
    ]
    assert got == reported
    assert _state(ff) == _state(ref)
    # Afterwards both go on alike.
    while (nxt := plan_async_decode_stretch(ff, 7, True)) is not None:
        records = nxt.apply(nxt.max_steps, SAMPLE_TOKEN_ID).records
        assert list(zip(*records)) == _step_iterations(ref, nxt.max_steps)[0]
        assert _state(ff) == _state(ref)


def test_a_stretch_ends_before_an_arrival_schedule_would_treat_otherwise() -> None:
    """The stretch stops before the iteration of a join that ``schedule()`` would chunk,
    hold back or refuse, and takes nothing after it."""

    def planned(queue: BatchQueue, join: Request, at: int = 5) -> int | None:
        later = _request("z", 10, 5, 9)
        plan = plan_async_decode_stretch(queue, 40, True, [Join(at, join), Join(at + 2, later)])
        if plan is None:
            return None
        assert all(j.iteration < at or j.request is not later for j in plan.joins[:1])
        return plan.max_steps

    def running(**kw: Any) -> BatchQueue:
        queue = _queue(200, **kw)
        _add(queue, "a", 30, 80, 0)
        _add(queue, "b", 17, 80, 1)
        _warm(queue)
        return queue

    assert planned(running(), _request("c", 40, 10, 2)) == 40
    assert planned(running(budget=40), _request("c", 40, 10, 2)) == 4  # over the budget
    assert planned(running(budget=41), _request("c", 39, 10, 2)) == 40
    assert planned(running(), _request("c", 40, 10, 2), at=1) == 40
    eos = _request("c", 40, 10, 2)
    eos.eos_token_id = 2
    assert planned(running(), eos) == 4
    adapter = _request("c", 40, 10, 2)
    adapter.lora_request = LoRARequest.from_id(1)
    assert planned(running(), adapter) == 4
    no_lookup = _request("c", 40, 10, 2)
    no_lookup.skip_reading_prefix_cache = True
    assert planned(running(), no_lookup) == 4
    assert planned(running(), _request("c", 40, 10, 2), at=0) is None
    seqs = running()
    seqs.scheduler.max_num_running_reqs = 2
    assert planned(seqs, _request("c", 40, 10, 2)) == 4
    tight = _queue(8)  # 7 usable blocks: a holds 2 and b 2 after the warm-up
    _add(tight, "a", 30, 80, 0)
    _add(tight, "b", 17, 80, 1)
    _warm(tight)
    assert planned(tight, _request("c", 40, 10, 2), at=2) == 1  # c's 3 blocks + growth
    # 9 usable blocks: by iteration 5 a and b hold 5 and c takes 3, one left free.
    roomy = _queue(10)
    _add(roomy, "a", 30, 80, 0)
    _add(roomy, "b", 17, 80, 1)
    _warm(roomy)
    assert planned(roomy, _request("c", 40, 10, 2)) > 5
    roomy.scheduler.kv_cache_manager.watermark_blocks = 2  # but 2 must stay free
    assert planned(roomy, _request("c", 40, 10, 2)) == 4
    idle = _queue(200)  # a finishes in iteration 3: the engine idles until c comes
    _add(idle, "a", 30, 4, 0)
    _warm(idle)
    assert planned(idle, _request("c", 40, 10, 2)) == 3  # a's last iteration
    assert planned(idle, _request("c", 40, 10, 2), at=3) == 13  # c's


@pytest.mark.parametrize("name", JOIN_SCENARIOS)
def test_first_prefills_are_the_admissions(name: str) -> None:
    """Joins of iteration 1: the prompt tokens :meth:`first_prefills` foresees are those
    the admissions compute (the prompt less the hits found then)."""
    joins = [(1, rid, p, m, s) for _, rid, p, m, s in JOIN_SCENARIOS[name][4]]
    queue = _join_queue(name)
    reqs = [_request(rid, p, m, s) for _, rid, p, m, s in joins]
    plan = plan_async_decode_stretch(queue, 12, True, [Join(1, r) for r in reqs])
    if plan is None or len(plan.joins) < len(reqs) or plan.max_steps < 2:
        return  # not taken: nothing foreseen
    foreseen = plan.first_prefills()
    if foreseen is None:
        assert len({r.block_hashes[0] for r in reqs}) < len(reqs)  # shared first blocks
        return
    plan.apply(2, SAMPLE_TOKEN_ID)
    assert foreseen == [r.num_prompt_tokens - r.num_cached_tokens for r in reqs]


def test_first_prefills_unknown_when_hits_could_change() -> None:
    """None when two joins share their first block, or when the running decodes'
    registrations in iteration 1 extend what a join would hit."""
    queue = _queue(100)
    _add(queue, "a", 31, 40, 0)  # its 32nd token (its first output) fills block 2
    _warm(queue)
    first_two = [1000 + i for i in range(31)] + [SAMPLE_TOKEN_ID]
    hasher = BlockHasher.from_name(BLOCK)
    y = Request("y", first_two + list(range(2000, 2010)), 5, block_hasher=hasher)
    assert queue.scheduler.kv_cache_manager.get_computed_blocks(y)[1] == BLOCK  # now
    plan = plan_async_decode_stretch(queue, 12, True, [Join(1, y)])
    assert plan is not None and plan.first_prefills() is None
    stepped = _queue(100)
    _add(stepped, "a", 31, 40, 0)
    _warm(stepped)
    stepped.scheduler.add_request(
        Request("y", first_two + list(range(2000, 2010)), 5, block_hasher=hasher)
    )
    stepped.step()
    assert stepped.scheduler.requests["y"].num_cached_tokens == 2 * BLOCK  # then
    twins = [_request("c", 40, 5, 3), _request("d", 40, 5, 3)]
    plan = plan_async_decode_stretch(_join_queue("hit"), 12, True, [Join(1, r) for r in twins])
    assert plan is not None and plan.first_prefills() is None
    other = [_request("c", 40, 5, 3), _request("d", 40, 5, 4)]
    plan = plan_async_decode_stretch(_join_queue("hit"), 12, True, [Join(1, r) for r in other])
    assert plan is not None and plan.first_prefills() == [40, 40]
