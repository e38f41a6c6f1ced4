"""Fast-forward in the engine loop: stretches of decode-only steps advanced at once.

A :class:`StretchRunner` is what a :class:`sim.engine.replica.ReplicaEngine` that fast-forwards
is composed with (the cluster decides once which engines do, :mod:`sim.engine.regime`).
It plans stretches with :func:`kvcore.fast_forward.plan_decode_stretch` (the
synchronous loop) or :func:`kvcore.fast_forward_async_plan.plan_async_decode_stretch` (the
async-scheduling loop: iterations that schedule a batch and apply the one in flight),
times them, applies them and writes their records exactly as stepping one by one would.
It reads its engine's state and changes it only through the engine's methods
(:meth:`~sim.engine.replica.ReplicaEngine.claim_steps`, ``finish_request``, ``costs``,
``note_first_token``, ``relaunch_in_flight``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from kvcore.block_pool import BlockPool
from kvcore.fast_forward import plan_decode_stretch
from kvcore.request import Request
from kvcore.sched_output import SchedulerOutput
from kvcore.scheduler import Scheduler
from kvcore.stretch_blocks import StretchRecords
from sim.engine.simpy_internals import next_event_time
from sim.engine.step_timing import StretchTimer, timeout_at
from sim.records.decision_line import decode_decision_lines
from sim.records.recorders import StepRecorder
from sim.records.step_row import DecodeRows

if TYPE_CHECKING:
    from sim.engine.regime import EngineRegime
    from sim.engine.replica import ReplicaEngine

SAMPLE_TOKEN_ID = 7
"""The id of every sampled token (EOS is ignored, so requests run to max_tokens)."""
FAST_FORWARD_HORIZON = 2048
"""Most decode-only steps planned at once (longer stretches are planned again)."""


class StepTimeout(simpy.Timeout):
    """A replica's step timeout. With several replicas and a workload that does not
    react to finishes, another replica's stretch may run past these (no replica's
    steps look at another's state; only arrivals, through the router, do)."""


class Segment:
    """One applied fast-forward stretch: its steps' numbers, times and block counts.

    A plain class, not a ``NamedTuple`` or a dataclass: one is made per stretch, and a
    compiled plain class is built without Python code (the constructor of either is
    Python's: as a compiled dataclass, 1% more instructions in the main process of a
    4,000-request trace run)."""

    __slots__ = (
        "batch",
        "durations",
        "end",
        "finish_s",
        "finished",
        "head",
        "pieces",
        "records",
        "rids",
        "starts",
        "step0",
    )

    def __init__(
        self,
        step0: int,
        starts: list[float],
        durations: list[float],
        end: float,
        batch: int,
        records: StretchRecords,
        finished: list[Request],
        rids: list[str] | None,
        head: tuple[SchedulerOutput, int, int, int, int] | None = None,
        pieces: list[RowRun] | None = None,
        finish_s: list[float] | None = None,
    ) -> None:
        """``rids``: the scheduled request ids, when decisions are written. Async only:
        ``head``, the first step's output, prefill and decode tokens, prefix queries
        and hits when its row is not a plain decode row (prompts completed in it,
        preemptions or prefix lookups recorded); ``pieces``, the steps in runs of the
        same requests, in order (one run when no request finishes before the last
        step); ``finish_s``, when each of ``finished`` finished (s; else all at
        ``end``)."""
        self.step0 = step0
        self.starts = starts
        self.durations = durations
        self.end = end
        self.batch = batch
        self.records = records
        self.finished = finished
        self.rids = rids
        self.head = head
        self.pieces = pieces
        self.finish_s = finish_s


class RowRun:
    """Steps ``lo .. hi - 1`` of a segment, each decoding one token for each of the
    same ``batch`` requests (ids ``rids`` when decisions are written), after which
    ``last_running`` run; ``finished``: the ids that finish in step ``hi - 1`` (a
    plain class, as :class:`Segment`)."""

    __slots__ = ("batch", "finished", "hi", "last_running", "lo", "rids")

    def __init__(
        self,
        lo: int,
        hi: int,
        batch: int,
        last_running: int,
        rids: list[str] | None,
        finished: list[str],
    ) -> None:
        self.lo = lo
        self.hi = hi
        self.batch = batch
        self.last_running = last_running
        self.rids = rids
        self.finished = finished


class StretchRunner:
    """The fast-forward of one replica's engine (seconds)."""

    def __init__(
        self,
        engine: ReplicaEngine,
        timer: StretchTimer,
        regime: EngineRegime,
    ) -> None:
        """``timer``: the stretches' step times (:func:`sim.engine.step_timing.make_stretch_timer`);
        ``regime``: the engine's (:class:`sim.engine.regime.EngineRegime`): whether this
        replica writes the records alone (one replica) and whether the workload may
        submit when a request finishes."""
        self.engine = engine
        self.env: simpy.Environment = engine.env
        self.scheduler: Scheduler = engine.scheduler
        self.steps: StepRecorder = engine.steps
        self.decisions: Any = engine.decisions
        self.pool: BlockPool = engine.pool
        self.replica_id: int = engine.replica_id
        self.check: bool = engine.check
        self._stretch = timer
        self._one_writer = regime.one_writer
        self._reacts_to_finish = regime.reacts_to_finish
        self.num_fast_forwarded = 0  # steps advanced by fast-forward
        self.num_stretches = 0  # fast-forward stretches (of one step or more)

    def _segment(self, start: float, until: float) -> Segment | None:
        """Plan and apply one stretch whose first step starts at ``start``; None when
        no step can be fast-forwarded. Its steps start before ``until``; a finishing
        last step must also end before it (frees are visible to routers)."""
        scheduler = self.scheduler
        stretch = plan_decode_stretch(scheduler, FAST_FORWARD_HORIZON)
        if stretch is None:
            return None
        starts, durations, end = self._stretch(
            start, until, stretch.batch_size, stretch.context0, stretch.max_steps
        )
        k = len(starts)
        if k == stretch.max_steps and stretch.finishes and not end < until:
            k -= 1  # the finishing step would end at or after the next event
            if k:
                end = starts[k]
                del starts[k:], durations[k:]
        if k < 1:
            return None
        rids = [r.request_id for r in scheduler.running] if self.decisions is not None else None
        recs, finished = stretch.apply(k, SAMPLE_TOKEN_ID)
        step0 = self.engine.claim_steps(k)
        self.num_fast_forwarded += k
        self.num_stretches += 1
        return Segment(step0, starts, durations, end, stretch.batch_size, recs, finished, rids)

    def _write_segment(self, seg: Segment, lo: int, hi: int) -> None:
        """Rows (and decisions) of the segment's steps ``lo .. hi - 1`` (all with the
        segment's batch; requests finish only in its last step)."""
        last = hi == len(seg.starts)
        batch = seg.batch
        # Ids only for decisions (several replicas write a step at a time through here).
        ids = last and seg.rids is not None
        finished = [r.request_id for r in seg.finished] if ids else []
        running = batch - len(seg.finished) if last else batch
        self._write_rows(seg, RowRun(lo, hi, batch, running, seg.rids, finished))

    def _write_rows(self, seg: Segment, run: RowRun) -> None:
        """Rows (and decisions) of the segment's steps ``run.lo .. run.hi - 1``."""
        lo, hi = run.lo, run.hi
        free, cached, cached_free = seg.records
        durations, starts = seg.durations, seg.starts
        if lo or hi != len(durations):  # a part of the segment
            durations, starts = durations[lo:hi], starts[lo:hi]
            free, cached, cached_free = free[lo:hi], cached[lo:hi], cached_free[lo:hi]
        rows = DecodeRows(
            replica=self.replica_id,
            step0=seg.step0 + lo,
            start0_s=seg.starts[lo],
            batch=run.batch,
            last_running=run.last_running,
            num_usable_blocks=self.pool.num_gpu_blocks - 1,
            durations=durations,
            num_free_blocks=free,
            num_cached_blocks=cached,
            num_cached_free_blocks=cached_free,
        )
        # The segment's starts are the timer's running sum of its durations, the sums
        # DecodeRows.starts() makes again (bit for bit: the same additions in order).
        if self.check:
            assert starts == rows.starts(), "a stretch's starts are not its durations' sums"
        self.steps.add_decode_steps(rows, starts)
        if run.rids is not None:
            self.decisions.write(
                decode_decision_lines(self.replica_id, rows.step0, run.rids, free, run.finished)
            )

    def try_fast_forward(self) -> Generator[simpy.Event, Any, bool]:
        """Advance stretches of decode-only steps at once; yield their timeouts.

        Returns True when it advanced. A stretch's steps all start before the next SimPy
        event that may look at this replica (an arrival; with a workload that reacts to
        finishes or one replica, any event), none needs a block the pool cannot serve,
        and its last step may be one in which requests finish if that step also ends
        before that event. With one replica writing the records, the stretch is one
        event at its exact end time, and when the workload does not react to finishes
        the next stretch is chained on at once (the finished requests are recorded at
        their own finish times); with several, each step keeps its own events and
        writes its rows when it ends, so rows interleave across replicas as they do step
        by step.
        """
        scheduler = self.scheduler
        if self.engine.has_pending or scheduler.waiting or not scheduler.running:
            return False
        env = self.env
        until = self._stretch_bound()
        if until <= env.now:
            return False
        done: list[tuple[Request, float]] = []
        if self._one_writer:
            end = self.chain_stretches(env.now, until, done)
            if end is None:
                return False
            yield from self.finish_at(end, done)
            return True
        seg = self._segment(env.now, until)
        if seg is None:
            return False
        for j in range(len(seg.starts)):
            yield StepTimeout(env, seg.durations[j])
            if env.peek() <= env.now:
                yield env.timeout(0)
            self._write_segment(seg, j, j + 1)
        done += [(req, env.now) for req in seg.finished]
        yield from self.finish_at(None, done)
        return True

    def finish_at(
        self, end: float | None, done: list[tuple[Request, float]]
    ) -> Generator[simpy.Event, Any, None]:
        """Wait until ``end`` (steps already applied; None: no wait), let arrivals due
        then join, and record the finished requests ``done`` at their finish times."""
        env = self.env
        if end is not None:
            yield timeout_at(env, end)
            if env.peek() <= env.now:
                yield env.timeout(0)
        if self.check:
            self.scheduler.check_invariants()
        finish = self.engine.finish_request
        for req, when in done:
            finish(req, when)

    def chain_stretches(
        self, start: float, until: float, done: list[tuple[Request, float]]
    ) -> float | None:
        """With one replica: apply and write a stretch from ``start`` (its steps start
        before ``until``) and, when the workload does not react to finishes, the
        stretches after each one in which requests finish; add the finished requests
        with their finish times to ``done``. Returns the end of the last stretch, or
        None when no step can be fast-forwarded (then nothing changed)."""
        scheduler = self.scheduler
        if scheduler.waiting or not scheduler.running:
            return None
        seg = self._segment(start, until)
        if seg is None:
            return None
        chain = not self._reacts_to_finish
        while True:
            self._write_segment(seg, 0, len(seg.starts))
            done += [(req, seg.end) for req in seg.finished]
            if not (chain and seg.finished and scheduler.running):
                return seg.end
            nxt = self._segment(seg.end, until)
            if nxt is None:
                return seg.end
            seg = nxt

    def _stretch_bound(self) -> float:
        """The time before which a stretch's steps must start: the next SimPy event;
        with several replicas and a workload that does not react to finishes, the next
        event that is not another replica's step (steps of different replicas do not
        look at each other; arrivals, through the router, do)."""
        env = self.env
        if self._one_writer or self._reacts_to_finish:
            return env.peek()
        return next_event_time(env, StepTimeout)
