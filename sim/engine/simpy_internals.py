"""The two places kvsim reaches inside SimPy's ``Environment``, in one module.

SimPy has no public API for either, and its internals are pinned (``simpy>=4.1,<5``
in ``pyproject.toml``; ``tests/test_simpy_internals.py`` checks them on the installed
version):

- :func:`schedule_at`: an event that fires at an absolute time (a stretch of steps
  ends where the sequential sums of step times land, which ``env.timeout(d)`` from
  ``env.now`` cannot place exactly). SimPy 4 keeps its agenda in ``env._queue``, a
  heap of ``(time, priority, event id, event)``, ids from ``env._eid``; a triggered
  event has ``_ok`` and ``_value`` set.
- :func:`next_event_time`: the time of the next scheduled event that is not of a given
  type (the heap scanned; ``env.peek()`` gives only the very next one), and
  :func:`next_time_except`: that of the next event but a given one.
"""

from __future__ import annotations

from heapq import heappush

import simpy


def schedule_at(env: simpy.Environment, when: float) -> simpy.Event:
    """A succeeded event (value None) that fires at absolute time ``when`` (>= now),
    with a Timeout's priority."""
    event = simpy.Event(env)
    event._ok = True
    event._value = None
    heappush(env._queue, (when, simpy.events.NORMAL, next(env._eid), event))
    return event


def next_event_time(env: simpy.Environment, skip: type) -> float:
    """The earliest time of a scheduled event whose type is not ``skip`` (inf: none)."""
    return min(
        (when for when, _, _, event in env._queue if type(event) is not skip),
        default=float("inf"),
    )


def next_time_except(env: simpy.Environment, event: simpy.Event | None) -> float:
    """The earliest time of a scheduled event other than ``event`` (inf: none)."""
    return min((when for when, _, _, e in env._queue if e is not event), default=float("inf"))
