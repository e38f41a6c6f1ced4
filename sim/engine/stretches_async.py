"""Fast-forward in the async-scheduling loop (vLLM 0.33.0's default): stretches of
steady decode iterations, each scheduling a batch and applying the one in flight.

An :class:`AsyncStretchRunner` is the :class:`sim.engine.stretches.StretchRunner` of an
engine with a batch queue (one replica only): it plans with
:func:`kvcore.fast_forward_async.plan_async_decode_stretch` and writes the records the
async loop would write, the first step's row as the loop writes it when that step is
not a plain decode. Units: seconds.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from kvcore.batch_queue import BatchQueue
from kvcore.block_pool import BlockPool
from kvcore.fast_forward_async import Join, plan_async_decode_stretch
from kvcore.request import Request
from kvcore.sched_output import SchedulerOutput
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
        self.num_joined = 0  # arrivals a stretch admitted in its first iteration

    def try_fast_forward(
        self, arrivals: list[Request] | None = None
    ) -> Generator[simpy.Event, Any, bool]:
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
        recorded at their own finish times).

        ``arrivals``: the kvcore requests of the arrivals not yet added to the scheduler
        (:meth:`~sim.engine.replica_requests.ReplicaRequests.pending_requests`), which the
        first stretch then admits in its first iteration, as ``schedule()`` would
        (:meth:`_join_segment`); when it cannot, nothing changed and False is returned.
        Without them, the engine must have no arrivals waiting to be added."""
        env = self.env
        engine = self.engine
        queue = engine.batch_queue
        assert queue is not None  # built for an engine with a batch queue
        if not self._one_writer or env.now > engine.gpu_free:
            return False
        if arrivals is None and engine.has_pending:
            return False
        until = env.peek()
        if until <= env.now:
            return False
        done: list[tuple[Request, float]] = []
        if arrivals:
            seg = self._join_segment(queue, until, arrivals)  # its rows written
        else:
            seg = self._async_segment(queue, until)
            if seg is not None:
                self._write_async_segment(seg)
        if seg is None:
            return False
        while True:
            assert seg.finish_s is not None  # an async segment's
            done += zip(seg.finished, seg.finish_s)
            if seg.end >= until or (seg.finished and self._reacts_to_finish):
                break
            nxt = self._async_segment(queue, until)
            if nxt is None:
                break
            self._write_async_segment(nxt)
            seg = nxt
        yield from self.finish_at(seg.end, done)
        return True

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
        # The iteration after those whose batches start before until: it schedules
        # before until; it applies its batch at end, after until only if no request
        # finishes in it (as stepping would, once the event has passed).
        k = len(starts) + 1
        if end >= until and k in left:
            k -= 1
            if not k:
                return None
            end = starts[k - 1]
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
        duration, prefill, decode = self._last_batch_cost(out)
        engine.relaunch_in_flight(end, duration, prefill, decode)
        step0 = engine.claim_steps(k)
        self.num_fast_forwarded += k
        self.num_stretches += 1
        starts.insert(0, start0)
        durations.insert(0, duration0)
        del starts[k:], durations[k:]
        # Iteration f applies batch N + f - 1 when batch N + f starts (the end, for k).
        finish_s = [starts[f] if f < k else end for f in finished_in]
        pieces = _pieces(k, batch, left, finished, finished_in, rids)
        return Segment(
            step0, starts, durations, end, batch, recs, finished, rids, head, pieces, finish_s
        )

    def _join_segment(
        self, queue: BatchQueue, until: float, arrivals: list[Request]
    ) -> Segment | None:
        """:meth:`_async_segment` whose first iteration also admits ``arrivals`` (new
        requests not yet added to the scheduler; :class:`kvcore.fast_forward_async.Join`),
        with its rows and decisions written: batch ``N + 1`` then holds the running
        requests' decodes and the arrivals' prompts (less their prefix hits), timed as
        the engine's step cost times such a batch, and from batch ``N + 2`` on the
        arrivals decode with the others. None (nothing changed) when the plan does not
        take them all, their prefix hits are not known before the admission
        (:meth:`~kvcore.fast_forward_async.AsyncDecodeStretch.first_prefills`), or the
        stretch would not reach its second iteration before ``until``."""
        engine = self.async_engine
        start0, duration0, prefill0, decode0 = engine.oldest_in_flight()
        head_out = queue.queue[0].scheduler_output
        stretch = plan_async_decode_stretch(
            queue,
            FAST_FORWARD_HORIZON,
            through_finishes=not self._reacts_to_finish,
            joins=[Join(1, r) for r in arrivals],
        )
        if stretch is None or len(stretch.joins) < len(arrivals) or stretch.max_steps < 2:
            return None
        prefills = stretch.first_prefills()
        if prefills is None:
            return None
        running = list(self.scheduler.running)
        batch = stretch.batch_size
        left = stretch.steps_left + stretch.join_steps_left  # running order from 2 on
        computed0 = stretch.computed0 + stretch.join_computed0
        # Batch N + 1 (iteration 1's): the decodes of the running requests that do not
        # finish in iteration 1, in running order, then the prompts; each computing over
        # its known tokens (a decode's: all but the one scheduled; a prompt's: its hits).
        decoding = [c for c, f in zip(stretch.computed0, stretch.steps_left) if f > 1]
        hits = [r.num_tokens - p for r, p in zip(arrivals, prefills)]
        first_apply = engine.gpu_free
        if first_apply >= until:
            return None
        mixed = engine.costs.seconds([1] * len(decoding) + prefills, decoding + hits)
        starts, durations, end = [first_apply], [mixed], first_apply + mixed
        if stretch.max_steps > 2:
            more, more_d, end = self._batch_starts(
                end, until, computed0, left, stretch.max_steps - 1, j0=2
            )
            starts += more
            durations += more_d
        k = len(starts) + 1
        if end >= until and k in left:
            k -= 1
            end = starts[k - 1]
        if k < 2:
            return None
        engine.joined(arrivals)
        self.num_joined += len(arrivals)
        for r in running:  # first tokens come with the batch in flight (prompts in it)
            if not r.output_token_ids:
                engine.note_first_token(r.request_id, first_apply)
        result = stretch.apply(k, SAMPLE_TOKEN_ID)
        for r, p in zip(arrivals, prefills):  # the hits first_prefills foresaw
            assert r.num_prompt_tokens - r.num_cached_tokens == p, "prefix hits changed"
        stats = result.prefix_cache_stats
        assert stats is not None  # the scheduler logs stats (log_stats=True)
        duration, prefill, decode = self._last_batch_cost(result.scheduler_output)
        engine.relaunch_in_flight(end, duration, prefill, decode)
        step0 = engine.claim_steps(k)
        self.num_fast_forwarded += k
        self.num_stretches += 1
        starts.insert(0, start0)
        durations.insert(0, duration0)
        del starts[k:], durations[k:]
        # Iteration f applies batch N + f - 1 when batch N + f starts (the end, for k).
        finish_s = [starts[f] if f < k else end for f in result.finished_in]
        second = starts[2] if k > 2 else end  # iteration 2 applies the prompts' batch
        for r in arrivals:
            engine.note_first_token(r.request_id, second)
        members = running + arrivals
        rids = [r.request_id for r in members] if self.decisions is not None else None
        pieces = _pieces(k, batch, left, result.finished, result.finished_in, rids, lo=2)
        seg = Segment(
            step0,
            starts,
            durations,
            end,
            batch,
            result.records,
            result.finished,
            rids,
            None,
            pieces,
            finish_s,
        )
        gone = [
            [r.request_id for r, f in zip(result.finished, result.finished_in) if f == i]
            for i in (1, 2)
        ]
        # Step N (iteration 1 applies it): the batch in flight, with the arrivals' lookups.
        queries = stats.queries + stats.preempted_queries
        found = stats.hits + stats.preempted_hits
        self._write_row(
            seg,
            0,
            len(members) - len(gone[0]),
            prefill0,
            decode0,
            queries,
            found,
            head_out.num_scheduled_tokens,
            head_out.preempted_req_ids,
            gone[0],
        )
        # Step N + 1 (iteration 2 applies it): the decodes and the prompts.
        scheduled = {r.request_id: 1 for r, f in zip(running, stretch.steps_left) if f > 1}
        scheduled.update((r.request_id, p) for r, p in zip(arrivals, prefills))
        after = sum(1 for f in left if f > 2)
        self._write_row(
            seg, 1, after, sum(prefills), len(decoding), 0, 0, scheduled, set(), gone[1]
        )
        for run in pieces:
            self._write_rows(seg, run)
        return seg

    def _write_row(
        self,
        seg: Segment,
        j: int,
        num_running: int,
        prefill: int,
        decode: int,
        queries: int,
        hits: int,
        scheduled: dict[str, int],
        preempted: set[str],
        finished: list[str],
    ) -> None:
        """The row (and decision) of the segment's step ``j``, written out: what the
        loop's ``_record_step`` writes for it (nothing waits; ``preempted``: the ids its
        batch preempted)."""
        free, cached, cached_free = (c[j] for c in seg.records)
        row = StepRow(
            replica=self.replica_id,
            step=seg.step0 + j,
            start_s=seg.starts[j],
            duration_s=seg.durations[j],
            num_running=num_running,
            num_waiting=0,
            num_prefill_tokens=prefill,
            num_decode_tokens=decode,
            num_preempted=len(preempted),
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
                decision_line(self.replica_id, seg.step0 + j, scheduled, preempted, finished, free)
            )

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


def _pieces(
    k: int,
    batch: int,
    left: list[int],
    finished: list[Request],
    finished_in: list[int],
    rids: list[str] | None,
    lo: int = 0,
) -> list[RowRun]:
    """The ``k`` applied steps of a stretch of ``batch`` requests in runs of the same
    requests: step ``r`` (0-based; iteration ``r + 1`` applies batch ``N + r``) decodes
    the requests that finish after iteration ``r`` (``left``: the iteration each
    finishes in); a run ends with each step in which requests finish (``finished``, in
    iteration ``finished_in``); ``rids``: the requests' ids, when decisions are
    written. From step ``lo`` on (the steps before it written otherwise; ``batch``:
    the requests of step 0)."""
    if not finished and not lo:
        return [RowRun(0, k, batch, batch, rids, [])]
    runs: list[RowRun] = []
    size = sum(1 for f in left if f > lo)
    i = sum(1 for f in finished_in if f <= lo)
    while lo < k:
        hi = finished_in[i] if i < len(finished_in) else k
        gone: list[str] = []
        while i < len(finished_in) and finished_in[i] == hi:
            gone.append(finished[i].request_id)
            i += 1
        ids = None if rids is None else [r for r, f in zip(rids, left) if f > lo]
        runs.append(RowRun(lo, hi, size, size - len(gone), ids, gone))
        lo, size = hi, size - len(gone)
    return runs
