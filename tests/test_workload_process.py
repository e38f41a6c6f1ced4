"""The SimPy side: arrivals, closed loop, sessions, prefixes, determinism.

A fake engine finishes every request a fixed delay after it arrives and reports
``max_tokens`` output tokens back through ``on_finish``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
import simpy

from workloads import SimRequest, SyntheticWorkload, WorkloadSpec
from workloads.loader import workload_from_spec
from workloads.tokens import prefix_tokens


class FakeEngine:
    """Completes each request ``delay`` seconds after it arrives."""

    def __init__(self, workload, delay: float = 1.0) -> None:  # noqa: ANN001
        self.env = simpy.Environment()
        self.workload = workload
        self.delay = delay
        self.requests: list[SimRequest] = []
        self.finish_s: dict[str, float] = {}
        self.outputs: dict[str, list[int]] = {}
        self.live = 0
        self.max_live = 0
        self.done_seen_at: float | None = None

    def submit(self, request: SimRequest) -> None:
        assert request.arrival_s == self.env.now
        self.requests.append(request)
        self.live += 1
        self.max_live = max(self.max_live, self.live)
        self.env.timeout(self.delay).callbacks.append(lambda _e: self._finish(request))

    def _finish(self, request: SimRequest) -> None:
        self.live -= 1
        output = [(len(self.requests) * 31 + i) % 32000 for i in range(request.max_tokens)]
        self.outputs[request.request_id] = output
        self.finish_s[request.request_id] = self.env.now
        self.workload.on_finish(request.request_id, output, self.env.now)

    def run(self) -> FakeEngine:
        self.workload.start(self.env, self.submit)
        self.workload.all_submitted.callbacks.append(self._saw_done)
        self.env.run()
        return self

    def _saw_done(self, _event) -> None:  # noqa: ANN001
        self.done_seen_at = self.env.now


def make(**overrides: Any) -> SyntheticWorkload:
    data: dict[str, Any] = {
        "arrival": {"type": "poisson", "rate": 5},
        "prompt_len": {"type": "uniform", "min": 5, "max": 50},
        "output_len": {"type": "uniform", "min": 1, "max": 20},
        "num_requests": 200,
        "seed": 7,
    }
    data.update(overrides)
    spec = WorkloadSpec.model_validate(data)
    return workload_from_spec(spec, "test", ".", "test.yaml", "test")


def test_open_loop_arrivals_do_not_depend_on_completions():
    fast = FakeEngine(make(), delay=0.01).run()
    slow = FakeEngine(make(), delay=100.0).run()
    assert fast.requests == slow.requests
    assert len(fast.requests) == 200
    assert fast.requests[0].arrival_s == 0.0
    gaps = [b.arrival_s - a.arrival_s for a, b in zip(fast.requests, fast.requests[1:])]
    assert sum(gaps) / len(gaps) == pytest.approx(1 / 5, rel=0.2)


def test_done_and_counts():
    workload = make(num_requests=30)
    engine = FakeEngine(workload)
    assert not workload.done()
    engine.run()
    assert workload.done() and workload.num_submitted == 30 == workload.num_requests
    assert engine.done_seen_at == engine.requests[-1].arrival_s
    assert [r.request_id for r in engine.requests] == [f"req-{i}" for i in range(30)]
    assert not workload._live  # nothing kept after the requests finished
    workload.on_finish("no-such-request", [], 0.0)  # ignored
    with pytest.raises(RuntimeError):
        workload.start(simpy.Environment(), lambda r: None)


def test_token_ids_and_lengths_in_range():
    engine = FakeEngine(make(vocab_size=100)).run()
    for request in engine.requests:
        assert 5 <= len(request.prompt_token_ids) <= 50
        assert 1 <= request.max_tokens <= 20
        assert all(0 <= t < 100 for t in request.prompt_token_ids)
        assert request.priority == 0 and request.session_id is None


def test_closed_loop_never_exceeds_concurrency():
    workload = make(arrival={"type": "closed_loop", "concurrency": 4, "think_time_s": 0.5})
    engine = FakeEngine(workload, delay=1.0).run()
    assert engine.max_live == 4
    assert len(engine.requests) == 200 and workload.done()
    # Four at t = 0, then each client comes back 1.0 s (service) + 0.5 s (think) later.
    times = sorted({round(r.arrival_s, 9) for r in engine.requests})
    assert times[:3] == [0.0, 1.5, 3.0]
    assert sum(r.arrival_s == 0.0 for r in engine.requests) == 4


def test_closed_loop_duration_bound():
    workload = make(
        arrival={"type": "closed_loop", "concurrency": 3}, num_requests=None, duration_s=10.0
    )
    assert workload.num_requests is None
    engine = FakeEngine(workload, delay=1.0).run()
    assert len(engine.requests) == 30  # 3 clients x 10 one-second requests
    assert max(r.arrival_s for r in engine.requests) < 10.0
    assert workload.done() and engine.done_seen_at == 10.0


def test_open_loop_duration_bound():
    workload = make(num_requests=None, duration_s=40.0)
    engine = FakeEngine(workload, delay=0.5).run()
    assert all(r.arrival_s < 40.0 for r in engine.requests)
    assert len(engine.requests) == pytest.approx(200, rel=0.2)


def test_shared_prefix_groups():
    workload = make(shared_prefix={"num_groups": 3, "prefix_len": 40, "fraction": 1.0})
    engine = FakeEngine(workload).run()
    prefixes = {tuple(r.prompt_token_ids[:40]) for r in engine.requests}
    expected = {tuple(prefix_tokens(7, g, 40, 32000)) for g in range(3)}
    assert prefixes == expected  # same group: identical; different groups: different
    assert len(expected) == 3
    by_group = defaultdict(list)
    for r in engine.requests:
        by_group[tuple(r.prompt_token_ids[:40])].append(r)
        assert 45 <= len(r.prompt_token_ids) <= 90  # prefix + own 5..50 tokens
    for members in by_group.values():
        assert len({tuple(r.prompt_token_ids[40:45]) for r in members}) > len(members) // 2


def test_shared_prefix_fraction_and_zipf():
    workload = make(
        num_requests=2000,
        shared_prefix={
            "num_groups": 4,
            "prefix_len": 16,
            "fraction": 0.5,
            "popularity": {"type": "zipf", "s": 1.0},
        },
    )
    engine = FakeEngine(workload, delay=0.1).run()
    groups = {tuple(prefix_tokens(7, g, 16, 32000)): g for g in range(4)}
    hits = [groups.get(tuple(r.prompt_token_ids[:16])) for r in engine.requests]
    used = [g for g in hits if g is not None]
    assert len(used) / 2000 == pytest.approx(0.5, abs=0.04)
    share0 = used.count(0) / len(used)
    assert share0 == pytest.approx(1 / (1 + 1 / 2 + 1 / 3 + 1 / 4), abs=0.04)


def test_sessions_grow_prompt_with_outputs():
    workload = make(
        sessions={"turns": 4, "think_time_s": 2.0},
        num_requests=40,
        shared_prefix={"num_groups": 1, "prefix_len": 10},
    )
    engine = FakeEngine(workload, delay=1.0).run()
    sessions = defaultdict(list)
    for r in engine.requests:
        sessions[r.session_id].append(r)
    assert len(sessions) == 10 and all(len(turns) == 4 for turns in sessions.values())
    for turns in sessions.values():
        assert len({t.priority for t in turns}) == 1
        for before, after in zip(turns, turns[1:]):
            head = before.prompt_token_ids + engine.outputs[before.request_id]
            assert after.prompt_token_ids[: len(head)] == head
            assert 5 <= len(after.prompt_token_ids) - len(head) <= 50
            assert after.arrival_s == pytest.approx(engine.finish_s[before.request_id] + 2.0)


def test_sessions_hit_num_requests_exactly():
    workload = make(sessions={"turns": {"type": "uniform", "min": 2, "max": 5}}, num_requests=37)
    engine = FakeEngine(workload).run()
    assert len(engine.requests) == 37 and workload.done()


def test_sessions_in_closed_loop():
    workload = make(
        arrival={"type": "closed_loop", "concurrency": 2, "think_time_s": 5.0},
        sessions={"turns": 3, "think_time_s": 1.0},
        num_requests=12,
    )
    engine = FakeEngine(workload, delay=1.0).run()
    assert engine.max_live == 2 and len(engine.requests) == 12
    # A client's turns come 1 + 1 s apart, its next session 1 + 5 s after the last turn.
    assert sorted({r.arrival_s for r in engine.requests})[:4] == [0.0, 2.0, 4.0, 10.0]


def test_max_model_len_guard():
    workload = make(
        prompt_len={"type": "lognormal", "median": 400, "p90": 2000},
        output_len={"type": "lognormal", "median": 200, "p90": 800},
        max_model_len=1000,
        num_requests=300,
    )
    engine = FakeEngine(workload, delay=0.1).run()
    assert all(len(r.prompt_token_ids) + r.max_tokens <= 1000 for r in engine.requests)
    chatty = make(sessions={"turns": 50}, max_model_len=300, num_requests=100)
    engine = FakeEngine(chatty, delay=0.1).run()
    assert all(len(r.prompt_token_ids) + r.max_tokens <= 300 for r in engine.requests)
    assert len(engine.requests) == chatty.num_submitted


def test_priorities():
    workload = make(priority={"values": [0, 5], "weights": [3, 1]}, num_requests=2000)
    engine = FakeEngine(workload, delay=0.1).run()
    share = sum(r.priority == 5 for r in engine.requests) / 2000
    assert share == pytest.approx(0.25, abs=0.03)


def test_burst_all_at_time_zero():
    engine = FakeEngine(make(arrival={"type": "burst"}, num_requests=50)).run()
    assert len(engine.requests) == 50 and all(r.arrival_s == 0 for r in engine.requests)


def test_same_seed_same_requests_different_seed_different():
    def requests(seed: int, **kw: Any) -> list[SimRequest]:
        return FakeEngine(make(seed=seed, **kw), delay=0.7).run().requests

    extra = {"sessions": {"turns": 3}, "shared_prefix": {"num_groups": 2, "prefix_len": 16}}
    assert requests(1) == requests(1)
    assert requests(1, **extra) == requests(1, **extra)
    a, b = requests(1), requests(2)
    assert [r.arrival_s for r in a] != [r.arrival_s for r in b]
    assert [r.prompt_token_ids for r in a] != [r.prompt_token_ids for r in b]


def test_seed_override_changes_requests():
    from workloads import load_workload

    a = FakeEngine(load_workload("chat", seed=1), delay=0.5).run().requests[:20]
    b = FakeEngine(load_workload("chat", seed=1), delay=0.5).run().requests[:20]
    c = FakeEngine(load_workload("chat"), delay=0.5).run().requests[:20]
    assert a == b and a != c


def test_rag_preset_prefix_hits_match_expected_fraction():
    """An infinite block-hash cache over the generated rag requests hits the fraction that
    ``expected_prefix_hit_fraction`` predicts (within 2%)."""
    from workloads import expected_prefix_hit_fraction, load_workload

    workload = load_workload("rag")
    engine = FakeEngine(workload, delay=0.5).run()
    block = 16
    cache: set[int] = set()
    hit = queried = 0
    for request in engine.requests:
        tokens = request.prompt_token_ids
        keys, parent = [], 0
        for start in range(0, len(tokens) - block + 1, block):
            parent = hash((parent, tuple(tokens[start : start + block])))
            keys.append(parent)
        usable = (len(tokens) - 1) // block  # vLLM recomputes the last prompt token
        cached = 0
        while cached < min(usable, len(keys)) and keys[cached] in cache:
            cached += 1
        hit += cached * block
        queried += len(tokens)
        cache.update(keys)
    expected = expected_prefix_hit_fraction(workload.workload_spec, block_size=block)
    assert hit / queried == pytest.approx(expected, rel=0.02)


def test_keyed_streams_equal_fresh_streams() -> None:
    """A stream loaded on the shared generator draws what a fresh stream draws; a saved
    stream continues where it stopped, whatever was loaded in between."""
    from workloads.tokens import KeyedStreams, stream

    streams = KeyedStreams()
    a = streams.load(7, 2, 11).integers(0, 1000, 20).tolist()
    assert a == stream(7, 2, 11).integers(0, 1000, 20).tolist()
    assert a != streams.load(7, 2, 12).integers(0, 1000, 20).tolist()
    streams.load(7, 2, 11).random()
    parked = streams.save()
    streams.load(1, 1, 1).random()
    fresh = stream(7, 2, 11)
    fresh.random()
    assert (
        streams.restore(parked).integers(0, 10**9, 5).tolist()
        == fresh.integers(0, 10**9, 5).tolist()
    )
