"""Arrivals admitted by a stretch in the async-scheduling loop, instead of a stepped
iteration.

An :class:`ArrivalStretchRunner` is the async loop's stretch runner
(:class:`sim.engine.stretches_async.AsyncStretchRunner`) that also takes the requests
that arrived while the replica decoded steadily: the first iteration of its next
stretch admits them with their whole prompts after the running requests' decodes, as
``Scheduler.schedule`` would (:class:`kvcore.stretch_joins.Join`), and the stretch goes
on with them decoding. Batch ``N + 1`` then holds the decodes and the prompts less
their prefix hits, which must be known before the admission
(:func:`kvcore.stretch_joins.first_prefills`); it is timed as the engine's step cost
times such a batch, and its rows and decisions are those the loop writes. When the
plan does not take the arrivals, their hits could change, or the stretch would not
reach its second iteration before the next SimPy event, nothing changes and the loop
steps that iteration as before. So does an arrival with one prompt token left to
compute (a one-token prompt, or all but its last token hit): the engine's step cost
counts it as a decode with async scheduling, and times and records its batch as one
of decodes, which a stretch's mixed batch is not. Units: seconds.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from kvcore.batch_queue import BatchQueue
from kvcore.block_pool import BlockPool
from kvcore.fast_forward_async import AsyncDecodeStretch, AsyncStretchResult
from kvcore.fast_forward_async_plan import plan_async_decode_stretch
from kvcore.request import Request
from kvcore.sched_output import SchedulerOutput
from kvcore.stretch_joins import Join
from sim.engine.async_row_runs import row_runs
from sim.engine.stretches import FAST_FORWARD_HORIZON, SAMPLE_TOKEN_ID, Segment
from sim.engine.stretches_async import AsyncStretchRunner
from sim.records.decision_line import decision_line
from sim.records.step_row import StepRow

if TYPE_CHECKING:
    from sim.engine.regime import EngineRegime
    from sim.engine.replica_async import AsyncReplicaEngine
    from sim.engine.step_timing import StretchTimer


class ArrivalStretchRunner(AsyncStretchRunner):
    """The async loop's stretch runner that also admits arrivals (see the module
    docstring); built with :class:`sim.engine.stretches.StretchRunner`'s arguments."""

    def __init__(
        self, engine: AsyncReplicaEngine, timer: StretchTimer, regime: EngineRegime
    ) -> None:
        """:class:`sim.engine.stretches_async.AsyncStretchRunner`'s arguments."""
        super().__init__(engine, timer, regime)
        self.num_joined = 0  # arrivals a stretch admitted in its first iteration

    def admit_arrivals(self, arrivals: list[Request]) -> Generator[simpy.Event, Any, bool]:
        """At the top of an iteration of the async loop, with one batch in flight,
        nothing waiting and ``arrivals`` (the kvcore requests of the arrivals not yet
        added to the scheduler:
        :meth:`~sim.engine.replica_requests.ReplicaRequests.pending_requests`): admit
        them in the first iteration of a stretch and go on as
        :meth:`~sim.engine.stretches_async.AsyncStretchRunner.try_fast_forward` does.
        Returns True when it advanced; False when nothing changed."""
        until = self._bound()
        if until is None:
            return False
        queue = self.engine.batch_queue
        assert queue is not None  # built for an engine with a batch queue
        seg = self._join_segment(queue, until, arrivals)
        if seg is None:
            return False
        yield from self._chain(queue, until, seg)
        return True

    def _join_segment(
        self, queue: BatchQueue, until: float, arrivals: list[Request]
    ) -> Segment | None:
        """:meth:`_async_segment` whose first iteration also admits ``arrivals``, with
        its rows and decisions written; None when nothing changed (see the module
        docstring)."""
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
        first_apply = engine.gpu_free
        if prefills is None or 1 in prefills or first_apply >= until:  # one token: a decode
            return None
        starts, durations, end = self._times(stretch, until, first_apply, arrivals, prefills)
        left = stretch.steps_left + stretch.join_steps_left  # running order from 2 on
        k, end = self._last_iteration(starts, end, until, left)
        if k < 2:
            return None
        engine.joined(arrivals)
        self.num_joined += len(arrivals)
        running = list(self.scheduler.running)
        for r in running:  # first tokens come with the batch in flight (prompts in it)
            if not r.output_token_ids:
                engine.note_first_token(r.request_id, first_apply)
        result = stretch.apply(k, SAMPLE_TOKEN_ID)
        for r, p in zip(arrivals, prefills):  # the hits first_prefills foresaw
            assert r.num_prompt_tokens - r.num_cached_tokens == p, "prefix hits changed"
        step0, finish_s = self._applied(
            result.scheduler_output, k, end, starts, durations, start0, duration0,
            result.finished_in,
        )  # fmt: skip
        second = starts[2] if k > 2 else end  # iteration 2 applies the prompts' batch
        for r in arrivals:
            engine.note_first_token(r.request_id, second)
        ids = [r.request_id for r in running + arrivals]
        rids = ids if self.decisions is not None else None
        seg = Segment(
            step0, starts, durations, end, stretch.batch_size, result.records, result.finished,
            rids, finish_s=finish_s,
        )  # fmt: skip
        self._write_first_rows(seg, stretch, result, head_out, (prefill0, decode0), prefills, ids)
        pieces = row_runs(k, stretch.batch_size, left, seg.finished, result.finished_in, rids, 2)
        for run in pieces:
            self._write_rows(seg, run)
        return seg

    def _times(
        self,
        stretch: AsyncDecodeStretch,
        until: float,
        first_apply: float,
        arrivals: list[Request],
        prefills: list[int],
    ) -> tuple[list[float], list[float], float]:
        """Starts and durations of the batches ``N + 1 ..`` that start before ``until``
        (the first at ``first_apply``) and the end of the last: batch ``N + 1`` holds
        the decodes of the running requests that do not finish in iteration 1, in
        running order, then the prompts, each over its known tokens (a decode's: all
        but the one scheduled; a prompt's: its hits); the batches after it decode the
        running requests and the arrivals (:meth:`_batch_starts`)."""
        decoding = [c for c, f in zip(stretch.computed0, stretch.steps_left) if f > 1]
        hits = [r.num_tokens - p for r, p in zip(arrivals, prefills)]
        mixed = self.engine.costs.seconds([1] * len(decoding) + prefills, decoding + hits)
        starts, durations, end = [first_apply], [mixed], first_apply + mixed
        if stretch.max_steps > 2:
            more, more_durations, end = self._batch_starts(
                end,
                until,
                stretch.computed0 + stretch.join_computed0,
                stretch.steps_left + stretch.join_steps_left,
                stretch.max_steps - 1,
                j0=2,
            )
            starts += more
            durations += more_durations
        return starts, durations, end

    def _write_first_rows(
        self,
        seg: Segment,
        stretch: AsyncDecodeStretch,
        result: AsyncStretchResult,
        head_out: SchedulerOutput,
        head_tokens: tuple[int, int],
        prefills: list[int],
        ids: list[str],
    ) -> None:
        """The rows (and decisions) of steps ``N`` (the batch in flight, applied by
        iteration 1, which reports the arrivals' lookups; ``head_out``, ``head_tokens``:
        its output, prefill and decode tokens) and ``N + 1`` (the decodes of the
        running requests and the prompts, applied by iteration 2); ``ids``: the running
        requests' then the arrivals'."""
        gone = [
            [r.request_id for r, f in zip(seg.finished, result.finished_in) if f == i]
            for i in (1, 2)
        ]
        left = stretch.steps_left + stretch.join_steps_left
        stats = result.prefix_cache_stats
        assert stats is not None  # the scheduler logs stats (log_stats=True)
        self._write_row(
            seg,
            0,
            len(left) - len(gone[0]),
            head_tokens,
            (stats.queries + stats.preempted_queries, stats.hits + stats.preempted_hits),
            head_out.num_scheduled_tokens,
            head_out.preempted_req_ids,
            gone[0],
        )
        scheduled = {rid: 1 for rid, f in zip(ids, stretch.steps_left) if f > 1}
        scheduled.update((j.request.request_id, p) for j, p in zip(stretch.joins, prefills))
        decoding = sum(1 for f in stretch.steps_left if f > 1)
        self._write_row(
            seg,
            1,
            sum(1 for f in left if f > 2),
            (sum(prefills), decoding),
            (0, 0),
            scheduled,
            set(),
            gone[1],
        )

    def _write_row(
        self,
        seg: Segment,
        j: int,
        num_running: int,
        tokens: tuple[int, int],
        lookups: tuple[int, int],
        scheduled: dict[str, int],
        preempted: set[str],
        finished: list[str],
    ) -> None:
        """The row (and decision) of the segment's step ``j`` as the loop's
        ``_record_step`` writes it: ``num_running`` after it; ``tokens``: prefill and
        decode; ``lookups``: prefix-cache queries and hits its apply reports; the
        requests ``scheduled`` (tokens by id), ``preempted`` and ``finished`` in it;
        nothing waits."""
        free, cached, cached_free = (c[j] for c in seg.records)
        row = StepRow(
            replica=self.replica_id,
            step=seg.step0 + j,
            start_s=seg.starts[j],
            duration_s=seg.durations[j],
            num_running=num_running,
            num_waiting=0,
            num_prefill_tokens=tokens[0],
            num_decode_tokens=tokens[1],
            num_preempted=len(preempted),
            kv_usage=BlockPool.usage_at(free, self.pool.num_gpu_blocks - 1),
            num_free_blocks=free,
            num_cached_blocks=cached,
            prefix_queries=lookups[0],
            prefix_hits=lookups[1],
            num_cached_free_blocks=cached_free,
        )
        self.steps.add(row)
        if self.decisions is not None:
            line = decision_line(
                self.replica_id, seg.step0 + j, scheduled, preempted, finished, free
            )
            self.decisions.write(line)
