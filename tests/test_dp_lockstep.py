"""The lockstep time line of a MoE model's DP group (:mod:`sim.engine.dp_lockstep`), by hand."""

from __future__ import annotations

import pytest
import simpy

from sim.engine.dp_lockstep import LockstepForwards


def _rank(env, clock, plan, log, name):
    """A rank that waits ``delay`` then runs forwards of the given durations."""
    delay, durations = plan
    yield env.timeout(delay)
    for d in durations:
        fwd = clock.forward(d)
        yield fwd.done
        log.append((name, fwd.start, env.now))


def _run(plans):
    env = simpy.Environment()
    clock = LockstepForwards(env)
    log = []
    for name, plan in plans.items():
        env.process(_rank(env, clock, plan, log, name))
    env.run()
    return sorted(log), clock


def test_ranks_starting_together_end_with_the_slowest():
    log, clock = _run({"a": (0.0, [1.0, 1.0]), "b": (0.0, [3.0, 0.5])})
    assert log == [("a", 0.0, 3.0), ("a", 3.0, 4.0), ("b", 0.0, 3.0), ("b", 3.0, 4.0)]
    assert clock.num_forwards == 2 and clock.num_joined == 2


def test_a_rank_that_gets_work_mid_forward_starts_at_the_next():
    # b is idle (dummy batches) until 0.5, inside a's first forward: its own starts at 1
    log, _ = _run({"a": (0.0, [1.0, 1.0, 1.0]), "b": (0.5, [2.0])})
    assert log == [
        ("a", 0.0, 1.0),
        ("a", 1.0, 3.0),
        ("a", 3.0, 4.0),
        ("b", 1.0, 3.0),
    ]


def test_one_rank_alone_runs_at_its_own_pace():
    log, clock = _run({"a": (0.0, [0.25, 0.5])})
    assert log == [("a", 0.0, 0.25), ("a", 0.25, 0.75)]
    assert clock.num_joined == 0


def test_an_idle_group_starts_a_forward_when_work_comes():
    log, _ = _run({"a": (0.0, [1.0]), "b": (2.0, [1.0])})
    assert log == [("a", 0.0, 1.0), ("b", 2.0, 3.0)]


@pytest.mark.parametrize("n", [2, 4])
def test_every_rank_sees_the_same_forward_ends(n):
    plans = {f"r{i}": (0.0, [0.1 * (i + 1)] * 3) for i in range(n)}
    log, _ = _run(plans)
    ends = {}
    for _, start, end in log:
        ends.setdefault(start, set()).add(end)
    assert all(len(e) == 1 for e in ends.values())
    assert sorted(ends) == pytest.approx([0.0, 0.1 * n, 0.2 * n])
