"""The forward passes of one data-parallel group of a MoE model, in lockstep.

vLLM 0.33.0 runs each DP rank of a mixture-of-experts model as a
``DPEngineCoreProc`` (``vllm/v1/engine/core.py``; dense models' DP ranks are
independent engines): the expert layers' collectives need every rank in every forward
pass, so while any rank of the group has requests (a "wave") every rank steps, an
idle one with a dummy batch (``execute_dummy_batch``), and each forward pads its
batch to the largest token count across the ranks (``coordinate_batch_across_dp``).
A forward pass therefore starts on every rank together and lasts as long as the
slowest rank's.

:class:`LockstepForwards` keeps that time line in simulated seconds. A rank asks for
its next forward of ``duration`` seconds (its own step time) with :meth:`forward`:

- a forward that starts now or later, already asked for by another rank, is joined
  (its end moves to the later of the two);
- while a forward this rank is not part of runs (the rank ran a dummy batch in it),
  the rank's forward is the next one, which starts when that one ends;
- otherwise a forward starts now.

The returned :class:`Forward` has the forward's start and an event that fires at its
end (final once the forward has started: only ranks asking at its start instant can
join). A rank that gets work while a forward it is not part of runs schedules when
that forward ends (:meth:`busy_until`), as vLLM's engine core reads its input queue
after the dummy batch. Idle ranks' dummy batches are not timed: a one-token forward is
never the slowest rank's.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import simpy


@dataclass
class Forward:
    """One forward pass of the group: ``start`` and ``end`` (s), ``done`` fires at
    ``end``."""

    start: float
    end: float
    done: simpy.Event

    @property
    def duration(self) -> float:
        return self.end - self.start


class LockstepForwards:
    """The forward time line of one DP group (see the module)."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._last: Forward | None = None
        self.num_forwards = 0
        self.num_joined = 0
        """Forwards and the rank batches that joined one another rank opened."""

    def forward(self, duration: float) -> Forward:
        """The forward pass a rank whose step takes ``duration`` s runs next."""
        now = self.env.now
        last = self._last
        if last is not None and last.start >= now:
            last.end = max(last.end, last.start + duration)
            self.num_joined += 1
            return last
        start = now if last is None or last.end <= now else last.end
        fwd = Forward(start, start + duration, self.env.event())
        self._last = fwd
        self.num_forwards += 1
        self.env.process(self._finish(fwd))
        return fwd

    def busy_until(self) -> float:
        """When the forward now running ends, if it started before now (a rank with new
        work joins none before then: it is in that forward with a dummy batch); else
        now (s)."""
        now = self.env.now
        last = self._last
        if last is not None and last.start < now < last.end:
            return last.end
        return now

    def _finish(self, fwd: Forward) -> Generator[simpy.Event, Any, None]:
        """Fire ``fwd.done`` at its end (which ranks joining at its start may move)."""
        while self.env.now < fwd.end:
            yield self.env.timeout(fwd.end - self.env.now)
        fwd.done.succeed()
