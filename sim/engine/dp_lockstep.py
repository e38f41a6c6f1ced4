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

from sim.engine.stretches import StepTimeout


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

    def wait_while_busy(self) -> Generator[simpy.Event, Any, bool]:
        """A rank with nothing of its own on the GPU, before it schedules: while a
        forward of the group runs that the rank is not part of (it runs a dummy batch
        in it), wait for its end; True when it waited (the rank's loop then admits
        arrivals and tries again)."""
        until = self.busy_until()
        if until <= self.env.now:
            return False
        yield StepTimeout(self.env, until - self.env.now)
        return True

    def _finish(self, fwd: Forward) -> Generator[simpy.Event, Any, None]:
        """Fire ``fwd.done`` at its end (which ranks joining at its start may move)."""
        while self.env.now < fwd.end:
            yield self.env.timeout(fwd.end - self.env.now)
        fwd.done.succeed()


class RankBatches:
    """One DP rank's batches in flight in the async loop, oldest first, on its group's
    forward time line: each batch's forward (None until the rank's batch before it
    ends), duration (s), prefill and decode tokens. A batch without tokens takes no
    GPU time."""

    def __init__(self, group: LockstepForwards) -> None:
        self.group = group
        self._flight: list[tuple[Forward | None, float, int, int]] = []

    @property
    def empty(self) -> bool:
        """Whether no batch of this rank is in flight."""
        return not self._flight

    def add(self, duration: float, prefill: int, decode: int) -> None:
        """A batch just scheduled: on the GPU now when nothing of this rank runs, else
        when the batch before it ends."""
        self._flight.append((None, duration, prefill, decode))
        if len(self._flight) == 1:
            self._launch(0)

    def take_oldest(self) -> tuple[Forward, int, int]:
        """The oldest batch, out of the queue: its forward (on the GPU), prefill and
        decode tokens. Call :meth:`launch_next` once that forward has ended."""
        fwd, _, prefill, decode = self._flight.pop(0)
        assert fwd is not None  # the oldest batch is on the GPU
        return fwd, prefill, decode

    def launch_next(self) -> None:
        """After the oldest batch ended: the next one reaches the GPU now."""
        if self._flight:
            self._launch(0)

    def _launch(self, i: int) -> None:
        """Start batch ``i`` on the GPU now: the group's next forward."""
        _, duration, prefill, decode = self._flight[i]
        env = self.group.env
        if duration > 0:
            fwd = self.group.forward(duration)
        else:
            fwd = Forward(env.now, env.now, env.event().succeed())
        self._flight[i] = (fwd, duration, prefill, decode)
