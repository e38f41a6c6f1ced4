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
from kvcore.fast_forward_async import plan_async_decode_stretch
from kvcore.request import Request
from sim.engine.stretches import FAST_FORWARD_HORIZON, SAMPLE_TOKEN_ID, Segment, StretchRunner
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
        env = self.env
        engine = self.engine
        queue = engine.batch_queue
        assert queue is not None  # built for an engine with a batch queue
        if engine.has_pending or not self._one_writer or env.now > engine.gpu_free:
            return False
        until = env.peek()
        if until <= env.now:
            return False
        done: list[tuple[Request, float]] = []
        seg = self._async_segment(queue, until)
        if seg is None:
            return False
        while True:
            self._write_async_segment(seg)
            done += [(req, seg.end) for req in seg.finished]
            if seg.end >= until or (seg.finished and self._reacts_to_finish):
                break
            nxt = self._async_segment(queue, until)
            if nxt is None:
                break
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
        changed)."""
        engine = self.async_engine
        start0, duration0, prefill0, decode0 = engine.oldest_in_flight()
        head_out = queue.queue[0].scheduler_output
        stretch = plan_async_decode_stretch(queue, FAST_FORWARD_HORIZON)
        if stretch is None:
            return None
        batch = stretch.batch_size
        # Batches of all running requests that the stretch schedules (the finishing
        # iteration schedules one without the finishing requests).
        full = stretch.max_steps - 1 if stretch.finishes else stretch.max_steps
        # Batch N + j starts when batch N + j - 1 ends, which iteration j applies then.
        first_apply = engine.gpu_free
        starts, durations, end = self._stretch(first_apply, until, batch, stretch.context0, full)
        k = len(starts)
        if k < full or (stretch.finishes and k == full and end < until):
            # The iteration after those whose batches end before until: it schedules
            # before until; it applies its batch at end, after until only if no
            # request finishes in it (as stepping would, once the event has passed).
            k += 1
        elif k:
            end = starts[k - 1]
        else:
            return None
        running = self.scheduler.running
        rids = [r.request_id for r in running] if self.decisions is not None else None
        for r in running:  # first tokens come with the batch in flight (prompts in it)
            if not r.output_token_ids:
                engine.note_first_token(r.request_id, first_apply)
        recs, finished, out, stats = stretch.apply(k, SAMPLE_TOKEN_ID)
        assert stats is not None  # the scheduler logs stats (log_stats=True)
        queries = stats.queries + stats.preempted_queries
        hits = stats.hits + stats.preempted_hits
        head = None
        if prefill0 or decode0 != batch or head_out.preempted_req_ids or queries or hits:
            head = (head_out, prefill0, decode0, queries, hits)
        if out.total_num_scheduled_tokens:
            duration, prefill, decode, _ = engine.costs.cost(out)
        else:
            duration, prefill, decode = 0.0, 0, 0
        engine.relaunch_in_flight(end, duration, prefill, decode)
        step0 = engine.claim_steps(k)
        self.num_fast_forwarded += k
        self.num_stretches += 1
        starts.insert(0, start0)
        durations.insert(0, duration0)
        del starts[k:], durations[k:]
        return Segment(step0, starts, durations, end, batch, recs, finished, rids, head)

    def _write_async_segment(self, seg: Segment) -> None:
        """Rows (and decisions) of an async segment: its first step's row as the loop
        writes it when that step is not a plain decode (``seg.head``), the rest as
        decode rows."""
        k = len(seg.starts)
        if seg.head is None:
            self._write_segment(seg, 0, k)
            return
        out, prefill, decode, queries, hits = seg.head
        last = k == 1
        free, cached, cached_free = (c[0] for c in seg.records)
        row = StepRow(
            replica=self.replica_id,
            step=seg.step0,
            start_s=seg.starts[0],
            duration_s=seg.durations[0],
            num_running=seg.batch - len(seg.finished) if last else seg.batch,
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
            finished = [r.request_id for r in seg.finished] if last else []
            self.decisions.write(
                decision_line(
                    self.replica_id,
                    seg.step0,
                    out.num_scheduled_tokens,
                    out.preempted_req_ids,
                    finished,
                    free,
                )
            )
        if k > 1:
            self._write_segment(seg, 1, k)
