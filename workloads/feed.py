"""The arrivals of an open-loop workload that its SimPy process has not submitted yet,
which an engine may take before their time (:class:`ArrivalFeed`).

A replaying process submits request ``i`` once ``env.now`` reaches its time, as
``env.timeout(when - env.now)`` lands it: ``t_i = t + (when_i - t)`` with ``t`` the
time the process waited from, the previous request's (the start for the first), or
``t`` itself when ``when_i <= t``. Those times depend on the arrival times alone, so
the feed computes them ahead, with each request as the process would submit it. An
engine that can tell, from its own state, where each upcoming request would join
(a fast-forward stretch that admits them) takes them from the feed; the process
then skips them and waits, from whenever it wakes, until the next request's time
exactly. What the engine does with a taken request at its time is its business; the
feed tells the workload (its count of submitted requests) and whoever else counts
arrivals (``on_take``). The last request of a feed that knows its count is never
taken: the process submits it, and the workload is done then, as without a feed.
Arrival times are drawn as they are needed (an endless open loop's too). Times in
seconds.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import simpy

from workloads.request import SimRequest

At = Callable[[float], simpy.Event]
"""An event that fires at an absolute simulated time exactly (seconds)."""


class ArrivalFeed:
    """Upcoming requests of a replay (see the module docstring)."""

    def __init__(
        self,
        arrival_s: Iterable[float],
        total: int | None,
        build: Callable[[int, float], SimRequest],
        at: At,
        taken: Callable[[int], None],
    ) -> None:
        """``arrival_s``: each request's arrival time (s, in order; drawn as needed);
        ``total``: how many requests there are, the last one being the process's
        (None: as many as ``arrival_s`` gives, none of them last: something else ends
        the workload); ``build(i, t)``: request ``i`` arriving at ``t`` (called once
        per request, in order); ``at``: makes the process's waits (:data:`At`);
        ``taken(n)``: the workload counts ``n`` more requests submitted."""
        self._times = iter(arrival_s)
        self._total = total
        self._build = build
        self._at = at
        self._taken = taken
        self.on_take: Callable[[SimRequest], None] | None = None
        """Called with each request an engine takes (its arrival counted elsewhere)."""
        self._next = 0  # the next request not submitted
        self._t = 0.0  # the time its process waits from (the previous one's)
        self._when: deque[float] = deque()  # arrival times drawn, from _next on
        self._ahead: deque[SimRequest] = deque()  # built, from _next on
        self._waiting: simpy.Event | None = None

    @property
    def waiting(self) -> simpy.Event | None:
        """The event the process waits on now (it submits nothing when it fires if
        the engine took that request meanwhile), or None."""
        return self._waiting

    def _when_of(self, i: int) -> float | None:
        """The arrival time of the ``i``-th request not submitted yet; None: none."""
        when = self._when
        while len(when) <= i:
            if self._total is not None and self._next + len(when) >= self._total:
                return None
            nxt = next(self._times, None)
            if nxt is None:
                return None
            when.append(nxt)
        return when[i]

    @staticmethod
    def _landed(when: float, t: float) -> float:
        return t + (when - t) if when > t else t

    @property
    def num_left(self) -> int:
        """Requests not submitted yet, all but the last of which may be taken (with
        no ``total``, more than any stretch takes)."""
        return (sys.maxsize if self._total is None else self._total) - self._next

    def upcoming(self, i: int) -> SimRequest | None:
        """The ``i``-th request not submitted yet (0: the next), with its arrival time
        (``arrival_s``); None past the last one."""
        ahead = self._ahead
        while len(ahead) <= i:
            when = self._when_of(len(ahead))
            if when is None:
                return None
            t = ahead[-1].arrival_s if ahead else self._t
            ahead.append(self._build(self._next + len(ahead), self._landed(when, t)))
        return ahead[i]

    def take(self, n: int) -> list[SimRequest]:
        """Take the next ``n`` requests (each :meth:`upcoming` already): the process
        will not submit them."""
        assert not n or n < self.num_left, "the last request is the process's"
        ahead = self._ahead
        out = [ahead.popleft() for _ in range(n)]
        if out:
            for _ in range(n):
                self._when.popleft()
            self._next += n
            self._t = out[-1].arrival_s
            self._taken(n)
            if self.on_take is not None:
                for sr in out:
                    self.on_take(sr)
        return out

    def replay(self, env: simpy.Environment, submit: Callable[[SimRequest], Any]) -> Any:
        """The SimPy process that submits the requests the engine does not take, each
        at its time (a generator)."""
        while (when := self._when_of(0)) is not None:
            row = self._next
            t = self._landed(when, self._t)
            if t > env.now:
                self._waiting = self._at(t)
                yield self._waiting
                self._waiting = None
                continue  # taken meanwhile, or due now
            sr = self._ahead.popleft() if self._ahead else self._build(row, t)
            self._when.popleft()
            self._next = row + 1
            self._t = t
            submit(sr)
