"""The SimPy internals kvsim uses (sim/engine/simpy_internals.py) behave as it assumes on the
installed SimPy: an event scheduled at an absolute time fires there, in order with
ordinary timeouts, and the agenda scan finds the next event of another type."""

import simpy

from sim.engine.simpy_internals import next_event_time, schedule_at


class _Marker(simpy.Timeout):
    pass


def test_schedule_at_fires_at_the_time_in_order_with_timeouts():
    env = simpy.Environment()
    fired: list[tuple[str, float]] = []

    def proc():
        yield env.timeout(0.1)
        at = schedule_at(env, 0.1 + 0.2)  # not env.now + 0.2's rounding: exactly 0.3...
        fired.append(("scheduled", at.ok))
        yield at
        fired.append(("at", env.now))

    def other():
        yield env.timeout(0.3)
        fired.append(("timeout", env.now))

    env.process(proc())
    env.process(other())
    env.run()
    assert fired[0] == ("scheduled", True)
    assert ("at", 0.1 + 0.2) in fired and ("timeout", 0.3) in fired
    assert env.now == max(0.1 + 0.2, 0.3)


def test_next_event_time_skips_a_type():
    env = simpy.Environment()
    _Marker(env, 1.0)
    env.timeout(2.0)
    assert env.peek() == 1.0
    assert next_event_time(env, _Marker) == 2.0
    assert next_event_time(simpy.Environment(), _Marker) == float("inf")
