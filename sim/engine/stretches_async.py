"""Fast-forward in the async-scheduling loop (vLLM 0.33.0's default): stretches of
steady decode iterations, each scheduling a batch and applying the one in flight.

An :class:`AsyncStretchRunner` is the :class:`sim.engine.stretches.StretchRunner` of an
engine with a batch queue (one replica only): it plans with
:func:`kvcore.fast_forward_async_plan.plan_async_decode_stretch` and writes the records the
async loop would write, the first step's row as the loop writes it when that step is
not a plain decode. Units: seconds.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from kvcore.batch_queue import BatchQueue
from kvcore.block_pool import BlockPool
from kvcore.fast_forward_async_plan import plan_async_decode_stretch
from kvcore.request import Request
from kvcore.sched_output import SchedulerOutput
from sim.engine.async_row_runs import row_runs
from sim.engine.stretches import (
    FAST_FORWARD_HORIZON,
    SAMPLE_TOKEN_ID,
    RowRun,
    Segment,
    StretchRunner,
)
from sim.records.decision_line import decision_line
from sim.records.step_row import StepRow

if TYPE_CHECKING:
    from sim.engine.regime import EngineRegime
    from sim.engine.replica_async import AsyncReplicaEngine
    from sim.engine.step_timing import StretchTimer


class AsyncStretchRunner(StretchRunner):
    """The fast-forward of one replica's engine in the async-scheduling loop: its
    :meth:`try_fast_forward` is the async loop's (the engine's batch queue)."""

    def __init__(
        self,
        engine: AsyncReplicaEngine,
        timer: StretchTimer,
        regime: EngineRegime,
    ) -> None:
        """:class:`sim.engine.stretches.StretchRunner`'s arguments, for an engine of
        the async loop (whose batches in flight it reads and relaunches)."""
        super().__init__(engine, timer, regime)
        self.async_engine = engine

    def try_fast_forward(self) -> Generator[simpy.Event, Any, bool]:
        """At the top of an iteration of the async loop (one batch in flight, nothing
        waiting: the loop checks that before it calls this): advance stretches of steady
        decode iterations at once (:mod:`kvcore.fast_forward_async`) and wait, in one
        event, until the last of them applied its batch. Returns True when it advanced.

        With one replica only. Every iteration of a stretch starts before the next SimPy
        event and every batch it applies ends before that event, but the last, which
        may end after it if no request finishes in it: an arrival in the meantime joins
        at the next iteration's top, after that batch is applied, as stepping would
        have it, and nothing else looks at this replica (one replica; a finish could
        make the workload submit, so the batches in which requests finish end before
        the event). Stretches are chained on until the event, but for a workload that
        reacts to finishes, not after one in which requests finish (the finished are
        recorded at their own finish times)."""
        until = self._bound()
        if until is None or self.engine.has_pending:
            return False
        queue = self.engine.batch_queue
        assert queue is not None  # built for an engine with a batch queue
        seg = self._async_segment(queue, until)
        if seg is None:
            return False
        self._write_async_segment(seg)
        yield from self._chain(queue, until, seg)
        return True

    def _bound(self) -> float | None:
        """The time before which a stretch from now must schedule its iterations (the
        next SimPy event), or None when no stretch may start now (several writers of the
        records, a batch in flight that has not started, an event due now)."""
        env = self.env
        if not self._one_writer or env.now > self.engine.gpu_free:
            return None
        until = env.peek()
        return until if until > env.now else None

    def _chain(
        self, queue: BatchQueue, until: float, seg: Segment
    ) -> Generator[simpy.Event, Any, None]:
        """After ``seg`` (applied, its rows written): the stretches that follow it
        before ``until`` (see :meth:`try_fast_forward`), then one wait until the last
        applied its batch, and the finished requests recorded at their times."""
        done: list[tuple[Request, float]] = []
        while True:
            assert seg.finish_s is not None  # an async segment's
            done += zip(seg.finished, seg.finish_s)
            if seg.end >= until or (seg.finished and self._reacts_to_finish):
                break
            nxt = self._next_segment(queue, until)
            if nxt is None:
                break
            seg = nxt
        yield from self.finish_at(seg.end, done)

    def _next_segment(self, queue: BatchQueue, until: float) -> Segment | None:
        """The stretch chained on the last one, applied and its rows written (None:
        none, nothing changed)."""
        seg = self._async_segment(queue, until)
        if seg is not None:
            self._write_async_segment(seg)
        return seg

    def _async_segment(self, queue: BatchQueue, until: float) -> Segment | None:
        """Plan and apply one async stretch from the batch in flight, scheduled (its
        iterations start) before ``until``: the batches it applies end before
        ``until`` but for the last, which may end at or after it if no request finishes
        in it. Records the new batch in flight (its start is the stretch's end: the
        last applied batch's end) and returns the applied batches as a segment (its
        ``end``: that time); None when no iteration can be fast-forwarded (then nothing
        changed). Unless the workload reacts to finishes, the stretch goes on past the
        iterations in which requests finish, each recorded at its own time."""
        engine = self.async_engine
        start0, duration0, prefill0, decode0 = engine.oldest_in_flight()
        head_out = queue.queue[0].scheduler_output
        stretch = plan_async_decode_stretch(
            queue, FAST_FORWARD_HORIZON, through_finishes=not self._reacts_to_finish
        )
        if stretch is None:
            return None
        batch = stretch.batch_size
        left = stretch.steps_left  # the iteration each running request finishes in
        # Batch N + j starts when batch N + j - 1 ends, which iteration j applies then;
        # iteration j schedules batch N + j when it starts (at batch N + j - 1's start).
        first_apply = engine.gpu_free
        starts, durations, end = self._batch_starts(
            first_apply, until, stretch.computed0, left, stretch.max_steps - 1
        )
        k, end = self._last_iteration(starts, end, until, left)
        if not k:
            return None
        running = self.scheduler.running
        rids = [r.request_id for r in running] if self.decisions is not None else None
        for r in running:  # first tokens come with the batch in flight (prompts in it)
            if not r.output_token_ids:
                engine.note_first_token(r.request_id, first_apply)
        recs, finished, out, stats, finished_in, _ = stretch.apply(k, SAMPLE_TOKEN_ID)
        assert stats is not None  # the scheduler logs stats (log_stats=True)
        queries = stats.queries + stats.preempted_queries
        hits = stats.hits + stats.preempted_hits
        head = None
        if prefill0 or decode0 != batch or head_out.preempted_req_ids or queries or hits:
            head = (head_out, prefill0, decode0, queries, hits)
        step0, finish_s = self._applied(
            out, k, end, starts, durations, start0, duration0, finished_in
        )
        pieces = row_runs(k, batch, left, finished, finished_in, rids)
        return Segment(
            step0, starts, durations, end, batch, recs, finished, rids, head, pieces, finish_s
        )

    def _applied(
        self,
        out: SchedulerOutput,
        k: int,
        end: float,
        starts: list[float],
        durations: list[float],
        start0: float,
        duration0: float,
        finished_in: list[int],
    ) -> tuple[int, list[float]]:
        """After a stretch of ``k`` iterations applied (``out``: the batch it leaves in
        flight, from ``end``): relaunch that batch, claim the steps, and make
        ``starts``/``durations`` the applied batches' (batch ``N``, at ``start0`` for
        ``duration0``, first); returns the first step's number and when each request
        finished (iteration ``finished_in``)."""
        duration, prefill, decode = self._last_batch_cost(out)
        engine = self.async_engine
        engine.relaunch_in_flight(end, duration, prefill, decode)
        step0 = engine.claim_steps(k)
        self.num_fast_forwarded += k
        self.num_stretches += 1
        starts.insert(0, start0)
        durations.insert(0, duration0)
        del starts[k:], durations[k:]
        # Iteration f applies batch N + f - 1 when batch N + f starts (the end, for k).
        return step0, [starts[f] if f < k else end for f in finished_in]

    @staticmethod
    def _last_iteration(
        starts: list[float], end: float, until: float, left: list[int]
    ) -> tuple[int, float]:
        """The last iteration ``k`` of a stretch whose batches ``N + 1 ..`` start at
        ``starts`` (the last ends at ``end``), and when it applies its batch: the
        iteration after those whose batches start before ``until`` schedules before
        it, and applies its batch at ``end``, after ``until`` only if no request
        finishes in it (``left``: the iteration each finishes in), as stepping would
        once the event has passed; else the one before it (0: none)."""
        k = len(starts) + 1
        if end >= until and k in left:
            k -= 1
            end = starts[k - 1] if k else end
        return k, end

    def _last_batch_cost(self, out: SchedulerOutput) -> tuple[float, int, int]:
        """The duration (s), prefill and decode tokens of the batch a stretch leaves in
        flight (``out``: one decode token for each running request): the decode formula
        the engine's step cost takes for such a batch (stretches run only where it does:
        vectorized decode timing, no speculative decoding; check mode compares)."""
        costs = self.engine.costs
        running = self.scheduler.running
        batch = len(running)
        if not batch:
            return 0.0, 0, 0
        # Each request's context: its computed tokens but the one scheduled.
        seconds = costs.decode_seconds(batch, sum(r.num_computed_tokens for r in running) - batch)
        if self.check:
            assert costs.cost(out)[:3] == (seconds, 0, batch), "not a batch of steady decodes"
        return seconds, 0, batch

    def _batch_starts(
        self,
        start: float,
        until: float,
        computed0: list[int],
        left: list[int],
        n: int,
        j0: int = 1,
    ) -> tuple[list[float], list[float], float]:
        """The starts and durations of the batches ``N + j0 .. N + n`` that start before
        ``until`` (the first at ``start``), and the end of the last of them: batch
        ``N + j`` runs the requests that finish after iteration ``j`` (``left``: the
        iteration each finishes in; ``computed0``: its tokens as of before iteration 1,
        each batch computing over one more), so the step time is the timer's over each
        run of batches of the same requests."""
        cuts = sorted({f for f in left if f < n + 1})
        if not cuts:  # the same requests in every batch
            size = len(computed0)
            context = sum(computed0) + (j0 - 1) * size
            return self._stretch(start, until, size, context, n - j0 + 1)
        starts: list[float] = []
        durations: list[float] = []
        t = start
        j = j0  # the next batch: N + j
        for stop in [*cuts, n + 1]:  # batches N + j .. N + stop - 1
            if stop <= j:
                continue
            members = [c for c, f in zip(computed0, left) if f > j]
            size = len(members)
            s, d, t = self._stretch(t, until, size, sum(members) + (j - 1) * size, stop - j)
            starts += s
            durations += d
            if len(s) < stop - j:
                break
            j = stop
        return starts, durations, t

    def _write_async_segment(self, seg: Segment) -> None:
        """Rows (and decisions) of an async segment: its first step's row as the loop
        writes it when that step is not a plain decode (``seg.head``), the rest as
        decode rows, a run of them per set of requests (``seg.pieces``)."""
        pieces = seg.pieces
        assert pieces is not None  # an async segment's
        if seg.head is not None:
            self._write_head(seg, pieces[0])
        for run in pieces:
            if seg.head is not None and run.lo == 0:
                if run.hi == 1:
                    continue
                # The run without its first step.
                run = RowRun(1, run.hi, run.batch, run.last_running, run.rids, run.finished)
            self._write_rows(seg, run)

    def _write_head(self, seg: Segment, first: RowRun) -> None:
        """The row (and decision) of the segment's first step when it is not a plain
        decode; ``first``: the run of steps it begins."""
        assert seg.head is not None
        out, prefill, decode, queries, hits = seg.head
        only = first.hi == 1  # requests finish in it
        free, cached, cached_free = (c[0] for c in seg.records)
        row = StepRow(
            replica=self.replica_id,
            step=seg.step0,
            start_s=seg.starts[0],
            duration_s=seg.durations[0],
            num_running=first.last_running if only else first.batch,
            num_waiting=0,
            num_prefill_tokens=prefill,
            num_decode_tokens=decode,
            num_preempted=len(out.preempted_req_ids),
            kv_usage=BlockPool.usage_at(free, self.pool.num_gpu_blocks - 1),
            num_free_blocks=free,
            num_cached_blocks=cached,
            prefix_queries=queries,
            prefix_hits=hits,
            num_cached_free_blocks=cached_free,
        )
        self.steps.add(row)
        if self.decisions is not None:
            self.decisions.write(
                decision_line(
                    self.replica_id,
                    seg.step0,
                    out.num_scheduled_tokens,
                    out.preempted_req_ids,
                    first.finished if only else [],
                    free,
                )
            )
