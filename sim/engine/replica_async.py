"""A replica in vLLM 0.33.0's default loop, async scheduling
(``EngineCore.step_with_batch_queue``, a :class:`kvcore.async_scheduler.AsyncScheduler`
behind a :class:`kvcore.batch_queue.BatchQueue` of 2 batches).

Step N+1 is scheduled, with output placeholders, as soon as step N is launched; the
GPU runs batches one after another; the engine then waits for the oldest batch,
applies its output at its end and schedules the next. A request that arrives while
step N runs is added when N's output is applied and scheduled in N+2, one step later
than the synchronous loop (:class:`sim.engine.replica.ReplicaEngine`) would run it.
Host time (scheduling, input preparation, output processing) is not charged
separately: it overlaps the GPU's in this loop and is part of the latency model's
per-step overhead in both.

Fast-forward here is :class:`sim.engine.stretch_feed.FeedStretchRunner` (one replica):
an :class:`sim.engine.stretch_arrivals.ArrivalStretchRunner` that also takes a
replayed trace's upcoming requests ahead. With a KV connector the async loop is
:class:`sim.engine.connector.ConnectorEngine`'s. Units: seconds.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from kvcore.async_scheduler import AsyncScheduler
from kvcore.batch_queue import BatchQueue
from kvcore.sched_output import SchedulerOutput
from sim.engine.dp_lockstep import LockstepForwards, RankBatches
from sim.engine.regime import EngineRegime
from sim.engine.replica import ReplicaEngine
from sim.engine.replica_parts import ReplicaParts
from sim.engine.step_timing import StretchTimer
from sim.engine.stretch_arrivals import ArrivalStretchRunner
from sim.engine.stretch_feed import FeedStretchRunner
from sim.engine.stretches import StepTimeout, StretchRunner
from sim.spec_decode.engine import SpecDecodeRun


def make_replica_engine(
    parts: ReplicaParts,
    regime: EngineRegime | None = None,
    spec: SpecDecodeRun | None = None,
    lockstep: LockstepForwards | None = None,
) -> ReplicaEngine:
    """The engine of a replica without a KV connector: the async loop's when its
    scheduler is an ``AsyncScheduler``, else the synchronous one's (the arguments are
    :class:`sim.engine.replica.ReplicaEngine`'s)."""
    if parts.scheduler.connector is None and isinstance(parts.scheduler, AsyncScheduler):
        return AsyncReplicaEngine(parts, regime, spec, lockstep)
    return ReplicaEngine(parts, regime, spec, lockstep)


class AsyncReplicaEngine(ReplicaEngine):
    """A replica whose scheduler is an ``AsyncScheduler`` and has no KV connector
    (built with :class:`sim.engine.replica.ReplicaEngine`'s arguments)."""

    # Set when the loop starts (run): the batches in flight, oldest first (start s,
    # duration s, prefill tokens, decode tokens); with DP lockstep, on the group's
    # forward time line instead.
    _in_flight: list[tuple[float, float, int, int]]
    _rank_batches: RankBatches | None

    def _make_stretches(self, timer: StretchTimer, regime: EngineRegime) -> StretchRunner:
        return FeedStretchRunner(self, timer, regime)

    def run(self) -> Generator[simpy.Event, Any, None]:
        queue = self.batch_queue
        assert queue is not None  # an AsyncScheduler's engine has one
        self._in_flight = []
        self._rank_batches = None if self.lockstep is None else RankBatches(self.lockstep)
        yield from self._run_batch_queue(queue)

    def _run_batch_queue(self, queue: BatchQueue) -> Generator[simpy.Event, Any, None]:
        """vLLM 0.33.0's async-scheduling loop (``EngineCore.step_with_batch_queue``)
        in simulated time; see the module docstring.

        Each batch starts on the GPU when the one before it ends (or when it is
        scheduled, if the GPU is idle) and runs for the latency model's step time; a
        batch that schedules no tokens takes no GPU time. Arrivals join before every
        ``schedule()``; an engine that can schedule nothing with nothing in flight
        waits for an arrival (or is stuck, as in the synchronous loop)."""
        env = self.env
        scheduler = self.scheduler
        self._gpu_free = env.now
        timing = self._in_flight
        stretches = self.stretches  # a FeedStretchRunner here
        rank_batches = self._rank_batches
        while True:
            if self._pending and (yield from self._take_arrivals()):
                continue
            if self._aborts:
                self._apply_aborts()
            if (
                stretches is not None
                and len(timing) == 1
                and not scheduler.waiting
                and (yield from stretches.try_fast_forward())
            ):
                continue
            if not queue.has_work():
                if self.arrivals_done() and not self._pending:
                    return
                yield self._idle()
                continue
            if (
                rank_batches is not None
                and rank_batches.empty
                and self.lockstep is not None
                and (yield from self.lockstep.wait_while_busy())
            ):
                continue
            batch, must_wait = queue.schedule_next()
            if batch is not None:
                self._launch(batch.scheduler_output, batch.sampled_token_ids)
            if not must_wait:
                continue
            start, duration, prefill, decode = yield from self._await_oldest()
            applied, result = queue.apply_oldest()
            now = env.now
            out = applied.scheduler_output
            if self.spec is not None:
                self.spec.observe(result.spec_decoding_stats, now)
            if out.total_num_scheduled_tokens == 0:
                for req in result.finished_requests:  # earlier finishes only
                    self.finish_request(req, now)
                if not queue.queue and not scheduler.running and scheduler.waiting:
                    if self._pending:
                        continue
                    if self.arrivals_done():
                        raise self._no_fit()
                    yield self._idle()
                continue
            finished = self._record_step(out, result, start, duration, prefill, decode, now)
            if self.check:
                scheduler.check_invariants()
            for req in finished:
                self.finish_request(req, now)

    def _take_arrivals(self) -> Generator[simpy.Event, Any, bool]:
        """Add the arrivals before the next ``schedule()``: with one batch in flight and
        nothing waiting, a stretch may admit them in its first iteration, as
        ``schedule()`` would (:mod:`sim.engine.stretch_arrivals`; True: it did, and
        advanced); else they join the waiting queue (False)."""
        runner = self.stretches
        if (
            isinstance(runner, ArrivalStretchRunner)
            and len(self._in_flight) == 1
            and not self.scheduler.waiting
        ):
            arrivals = self.pending_requests()
            if (yield from runner.admit_arrivals(arrivals)):
                return True
            self._add_arrivals(arrivals)
        else:
            self._admit_pending()
        return False

    def _launch(self, out: SchedulerOutput, sampled: Any) -> None:
        """Put a scheduled batch on the GPU's time line (the DP group's with lockstep):
        it starts when the batch before it ends, or now if the GPU is idle, and runs for
        its step time (none when it schedules no token)."""
        if out.total_num_scheduled_tokens:
            duration, prefill, decode, _ = self.costs.cost(out, sampled)
        else:
            duration, prefill, decode = 0.0, 0, 0
        if self._rank_batches is not None:
            self._rank_batches.add(duration, prefill, decode)
        else:
            start = max(self.env.now, self._gpu_free)
            self._gpu_free = start + duration
            self._in_flight.append((start, duration, prefill, decode))

    def _await_oldest(self) -> Generator[simpy.Event, Any, tuple[float, float, int, int]]:
        """Wait for the oldest batch in flight to end, then let arrivals due at that
        instant join and apply the aborts that came while it ran (the aborts queue);
        returns its start (s), duration (s), prefill and decode tokens."""
        env = self.env
        rank_batches = self._rank_batches
        if rank_batches is not None:
            fwd, prefill, decode = rank_batches.take_oldest()
            yield fwd.done
            start, duration = fwd.start, fwd.duration
            rank_batches.launch_next()  # the next batch reaches the GPU now
        else:
            start, duration, prefill, decode = self._in_flight.pop(0)
            end = start + duration
            if end > env.now:
                yield StepTimeout(env, end - env.now)
        if env.peek() <= env.now:
            # Arrivals due at this instant join before the next schedule().
            yield env.timeout(0)
        if self._aborts:
            self._apply_aborts()
        return start, duration, prefill, decode

    # -- what the stretch runner (sim.engine.stretches_async) reads and changes ----

    def oldest_in_flight(self) -> tuple[float, float, int, int]:
        """The oldest batch in flight: start s, duration s, prefill and decode tokens."""
        return self._in_flight[0]

    def relaunch_in_flight(self, start: float, duration: float, prefill: int, decode: int) -> None:
        """After a stretch: the one batch in flight is the stretch's last scheduled,
        starting at ``start`` (s) for ``duration`` (s)."""
        self._in_flight[0] = (start, duration, prefill, decode)
        self._gpu_free = start + duration
