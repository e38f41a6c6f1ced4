"""Property tests of ``kvcore.scheduler.Scheduler`` on random traces and knobs.

Each example draws a trace (arrival steps, prompts from a few shared prefixes,
``max_tokens``, priorities) and the engine knobs (block size, a pool small enough
to force preemption, chunked prefill on/off, long-prefill threshold, fcfs/priority,
watermark, full or full + sliding-window groups, prefix caching on/off, lookahead),
then runs ``schedule()`` / ``update_from_output()`` with the fake model of
``kvcore.replay`` (token 7 for every request whose prefill is complete) until all
requests finish. Every step: ``check_invariants()``, at most
``max_num_batched_tokens`` tokens and ``max_num_seqs`` running requests; at the
end every request has exactly ``min(max_tokens, max_model_len - prompt)`` outputs,
all of them token 7, and every block is back in the free queue.

Operation count per CI run (each ``add_request``, ``schedule`` and
``update_from_output`` call is one operation; the counter ``OPS`` is checked at the
end of ``test_scheduler_random_traces``): ``max_examples=500`` traces of 1 to 12 requests
run about 60 steps each on average (two operations a step, plus one per
request), about 65,000 operations; the floor asserted is 50,000.

``test_async_scheduler_random_traces`` runs the same scenarios through an
``AsyncScheduler`` behind kvcore's batch queue of 2 (``kvcore.batch_queue``), with
the same end-state checks, plus: at most two batches in flight, every batch applied
exactly once and oldest first, and no request with more output placeholders than
batches in flight.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcore.batch_queue import BatchQueue, sample_fixed_token
from kvcore.block_hashing import BlockHasher
from kvcore.replay import ReplayConfig, build_scheduler
from kvcore.request import Request
from kvcore.utils import cdiv

MAX_EXAMPLES = 500
MAX_ASYNC_EXAMPLES = 300
MIN_OPS = 50_000
MAX_STEPS = 5_000
SAMPLE_TOKEN = 7
PREFIXES = [[100 + p] * 8 + list(range(p * 50, p * 50 + 40)) for p in range(3)]
"""Shared prompt prefixes (48 tokens each)."""

OPS = {"count": 0}
"""Scheduler calls executed in this process."""


@dataclass(frozen=True)
class TraceItem:
    """One request of a generated trace."""

    arrival_step: int
    prompt: tuple[int, ...]
    max_tokens: int
    priority: int


@dataclass(frozen=True)
class Scenario:
    """A trace and the engine knobs it runs under."""

    trace: tuple[TraceItem, ...]
    config: ReplayConfig
    max_model_len: int


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """A random trace plus knobs; the pool always fits one longest request."""
    items = []
    for _ in range(draw(st.integers(1, 12))):
        prefix = PREFIXES[draw(st.integers(0, len(PREFIXES) - 1))]
        prompt = prefix[: draw(st.integers(0, 48))] + draw(st.lists(st.integers(0, 3), max_size=24))
        items.append(
            TraceItem(
                arrival_step=draw(st.integers(0, 20)),
                prompt=tuple(prompt or [1]),
                max_tokens=draw(st.integers(1, 24)),
                priority=draw(st.integers(0, 3)),
            )
        )
    longest_prompt = max(len(t.prompt) for t in items)
    longest_seq = max(len(t.prompt) + t.max_tokens for t in items)
    if draw(st.booleans()):
        max_model_len = longest_seq
    else:  # cap some requests at max_model_len instead of max_tokens
        max_model_len = draw(st.integers(longest_prompt + 1, max(longest_prompt + 1, longest_seq)))
    max_model_len = max(max_model_len, 2)
    block_size = draw(st.sampled_from([1, 2, 4, 8, 16]))
    hybrid = draw(st.booleans())
    kv_groups = ("full", "sliding_window") if hybrid else ("full",)
    chunked = draw(st.booleans())
    max_num_seqs = draw(st.integers(1, 8))
    budget = draw(st.integers(max_num_seqs, 128))
    if not chunked:
        budget = max(budget, max_model_len)
    lookahead = draw(st.sampled_from([0, 0, 0, 2]))
    # One request of max_model_len (+ lookahead) fits in every group: no livelock,
    # but a pool this small still forces preemption.
    min_blocks = len(kv_groups) * cdiv(max_model_len + lookahead, block_size) + 2
    config = ReplayConfig(
        block_size=block_size,
        num_gpu_blocks=min_blocks + draw(st.integers(0, 24)),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=draw(st.sampled_from([True, True, True, False])),
        long_prefill_token_threshold=min(max_model_len, draw(st.sampled_from([0, 0, 1, 4, 16]))),
        policy=draw(st.sampled_from(["fcfs", "priority"])),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.01, 0.1])),
        kv_groups=kv_groups,
        sliding_window=draw(st.integers(1, 40)) if hybrid else None,
        prefix_caching_hash_algo="xxhash",
        max_model_len=max_model_len,
        num_lookahead_tokens=lookahead,
        none_hash_seed="kvsim-property-tests",
    )
    return Scenario(tuple(items), config, max_model_len)


@settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(scenarios())
def _scheduler_random_traces(scenario: Scenario) -> None:
    config = scenario.config
    max_model_len = scenario.max_model_len
    scheduler = build_scheduler(config, max_model_len)
    hasher = BlockHasher.from_name(
        config.block_size, config.prefix_caching_hash_algo, config.none_hash_seed
    )
    order = sorted(range(len(scenario.trace)), key=lambda i: scenario.trace[i].arrival_step)
    reqs: dict[str, Request] = {}
    finished: set[str] = set()
    next_idx = step = 0
    while True:
        while next_idx < len(order) and scenario.trace[order[next_idx]].arrival_step <= step:
            i = order[next_idx]
            item = scenario.trace[i]
            req = Request(
                f"req-{i}",
                list(item.prompt),
                item.max_tokens,
                arrival_time=item.arrival_step + next_idx * 1e-9,
                priority=item.priority,
                block_hasher=hasher,
            )
            scheduler.add_request(req)
            OPS["count"] += 1
            reqs[req.request_id] = req
            next_idx += 1
        if next_idx == len(order) and not scheduler.has_requests():
            break
        assert step < MAX_STEPS, f"no progress after {MAX_STEPS} steps"

        out = scheduler.schedule()
        OPS["count"] += 1
        assert out.total_num_scheduled_tokens == sum(out.num_scheduled_tokens.values())
        assert out.total_num_scheduled_tokens <= config.max_num_batched_tokens
        assert all(n > 0 for n in out.num_scheduled_tokens.values())
        assert len(scheduler.running) <= config.max_num_seqs
        assert not finished & set(out.num_scheduled_tokens), "a finished request was scheduled"
        scheduler.check_invariants()

        sampled = {
            rid: [SAMPLE_TOKEN]
            for rid in out.num_scheduled_tokens
            if not reqs[rid].is_prefill_chunk
        }
        result = scheduler.update_from_output(out, sampled)
        OPS["count"] += 1
        for rid in result.finished_req_ids:
            assert rid not in finished, f"{rid} finished twice"
            finished.add(rid)
        assert len(scheduler.running) <= config.max_num_seqs
        scheduler.check_invariants()
        step += 1

    check_end_state(scheduler, reqs, finished, max_model_len)


def check_end_state(scheduler, reqs: dict[str, Request], finished: set[str], max_model_len: int):
    """Every request finished with exactly its outputs; every block is free again."""
    pool = scheduler.kv_cache_manager.block_pool
    assert finished == set(reqs), "some request never finished"
    for rid, req in reqs.items():
        prompt_len = req.num_prompt_tokens
        expected = min(req.max_tokens, max_model_len - prompt_len)
        assert req.num_output_tokens == expected, (
            f"{rid}: {req.num_output_tokens} outputs, expected {expected}"
        )
        assert req.output_token_ids == [SAMPLE_TOKEN] * expected
        assert req.is_finished()
    assert pool.get_num_free_blocks() == pool.num_gpu_blocks - 1, "blocks leaked"
    assert scheduler.reset_prefix_cache()
    scheduler.check_invariants()


def _add_arrivals(scenario: Scenario, scheduler, hasher, step: int, state: dict) -> None:
    order = state["order"]
    while state["next"] < len(order) and scenario.trace[order[state["next"]]].arrival_step <= step:
        i = order[state["next"]]
        item = scenario.trace[i]
        req = Request(
            f"req-{i}",
            list(item.prompt),
            item.max_tokens,
            arrival_time=item.arrival_step + state["next"] * 1e-9,
            priority=item.priority,
            block_hasher=hasher,
        )
        scheduler.add_request(req)
        state["reqs"][req.request_id] = req
        state["next"] += 1


def test_scheduler_random_traces() -> None:
    """The synchronous scheduler on ``MAX_EXAMPLES`` random traces, and that they really
    executed the promised number of operations (checked here, in the same test,
    whatever runs the tests and where)."""
    before = OPS["count"]
    _scheduler_random_traces()
    ran = OPS["count"] - before
    assert ran >= MIN_OPS, f"only {ran} scheduler operations ran"


@settings(
    max_examples=MAX_ASYNC_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(scenarios())
def test_async_scheduler_random_traces(scenario: Scenario) -> None:
    config = replace(scenario.config, async_scheduling=True)
    max_model_len = scenario.max_model_len
    scheduler = build_scheduler(config, max_model_len)
    hasher = BlockHasher.from_name(
        config.block_size, config.prefix_caching_hash_algo, config.none_hash_seed
    )
    queue = BatchQueue(scheduler, sample_fixed_token(SAMPLE_TOKEN))
    order = sorted(range(len(scenario.trace)), key=lambda i: scenario.trace[i].arrival_step)
    state: dict = {"order": order, "next": 0, "reqs": {}}
    finished: set[str] = set()
    scheduled_steps: list[int] = []
    applied_steps: list[int] = []
    step = 0
    while True:
        _add_arrivals(scenario, scheduler, hasher, step, state)
        if state["next"] == len(order) and not queue.has_work():
            break
        assert step < MAX_STEPS, f"no progress after {MAX_STEPS} steps"
        it = queue.step()
        assert len(queue.queue) < queue.batch_queue_size
        if it.scheduled is not None:
            scheduled_steps.append(it.step)
            out = it.scheduled.scheduler_output
            assert out.total_num_scheduled_tokens <= config.max_num_batched_tokens
            assert not finished & set(out.num_scheduled_tokens), "a finished request was scheduled"
        if it.applied is not None:
            applied_steps.append(it.applied.step)
            for rid in it.output.finished_req_ids:
                assert rid not in finished, f"{rid} finished twice"
                finished.add(rid)
        assert len(scheduler.running) <= config.max_num_seqs
        for r in scheduler.running:
            assert 0 <= r.num_output_placeholders <= len(queue.queue)
        scheduler.check_invariants()
        step += 1
    assert applied_steps == scheduled_steps, "batches not applied once each, oldest first"
    check_end_state(scheduler, state["reqs"], finished, max_model_len)
