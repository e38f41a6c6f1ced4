"""A replica whose scheduler has a KV connector: vLLM 0.33.0's async-scheduling loop
with the connector's worker side, shared by the CPU offload tier
(:class:`sim.engine.offload.OffloadReplicaEngine`) and P/D's instances
(:class:`sim.engine.pd.PDReplicaEngine`).

:class:`ConnectorEngine` is a :class:`sim.engine.replica.ReplicaEngine` that runs, with async
scheduling (the default), :meth:`ConnectorEngine._run_batch_queue_connector`, and
without it the subclass's synchronous loop (``_run_steps``). The worker side of each
batch's connector metadata runs when the GPU reaches the batch (the end of the batch
before it), and what the workers report by the batch's end reaches
``update_from_output`` with the batch's output, one batch after the next was planned;
a batch that schedules no token still runs the connector (vLLM's
``kv_connector_no_forward``) and takes no GPU time. A subclass defines the worker
side (``_connector_start``, ``_connector_output``, ``_connector_after_output``,
``_connector_pending``, ``_connector_wait``). Fast-forward is off. Units: seconds.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from kvcore.batch_queue import Batch, BatchQueue
from kvcore.kv_cache_manager import PrefixCacheStats
from kvcore.kv_connector_output import KVConnectorOutput
from kvcore.request import Request
from kvcore.sched_output import EngineStepOutput, SchedulerOutput
from sim.engine.replica import ReplicaEngine
from sim.engine.stretches import StepTimeout
from sim.errors import SimulationStuck


class _Flight:
    """One batch in flight in the async loop with a KV connector (seconds)."""

    __slots__ = ("batch", "end_s", "num_decode", "num_prefill", "start_s")

    def __init__(
        self, batch: Batch, start_s: float, end_s: float, num_prefill: int, num_decode: int
    ) -> None:
        self.batch = batch
        self.start_s = start_s  # the worker side starts (the GPU reaches the batch)
        self.end_s = end_s  # the batch's output is ready (its report polled)
        self.num_prefill = num_prefill
        self.num_decode = num_decode


class ConnectorEngine(ReplicaEngine):
    """A replica whose scheduler has a KV connector (built with
    :class:`ReplicaEngine`'s arguments)."""

    # Set when the loop starts (run): the async loop's batches in flight, oldest first,
    # and the prefix-cache lookups of steps or batches that scheduled no token, counted
    # in the next recorded step.
    _flights: list[_Flight]
    _carried: PrefixCacheStats | None

    def run(self) -> Generator[simpy.Event, Any, None]:
        self._flights = []
        self._carried = None
        if self.batch_queue is not None:
            yield from self._run_batch_queue_connector(self.batch_queue)
        else:
            yield from self._run_steps()

    def _run_batch_queue_connector(self, queue: BatchQueue) -> Generator[simpy.Event, Any, None]:
        """vLLM 0.33.0's async-scheduling loop (``EngineCore.step_with_batch_queue``)
        with a KV connector (the CPU offload tier's here, P/D's in
        :class:`sim.engine.pd.PDReplicaEngine`), in simulated time.

        A batch reaches the GPU at ``t0``, when the batch before it ends (or when it
        is scheduled, if the GPU is idle); the worker side of its connector metadata
        runs then (:meth:`_connector_start`; a flush it waits for delays the batch's
        compute), and the batch computes for the latency model's step time. Its
        ``KVConnectorOutput`` is what the workers report by its end
        (:meth:`_connector_output`); it reaches ``update_from_output`` with the
        batch's output, after the next batch was scheduled: a load that ends while
        batch N runs lets its request be scheduled in N+2 (N+1 in the synchronous
        loop). A batch that schedules no token still runs the connector (vLLM's
        ``kv_connector_no_forward``) and takes no GPU time; when such a batch
        reports nothing and no batch computes, the engine sleeps until something can
        change (:meth:`_connector_wait`)."""
        env = self.env
        scheduler = self.scheduler
        self._gpu_free = env.now
        flights = self._flights
        while True:
            if self._pending:
                self._admit_pending()
            if self._aborts:
                self._apply_aborts()
            if not queue.has_work():
                if self._connector_pending():
                    # Work of the connector's alone (stores left to submit, reports
                    # to deliver): one engine iteration, its batch waited for.
                    yield from self._connector_step_alone()
                    continue
                if self.arrivals_done() and not self._pending:
                    return
                yield self._idle()
                continue
            batch, must_wait = queue.schedule_next()
            if batch is not None:
                flights.append(self._launch(batch))
            if not must_wait:
                continue
            flight = flights.pop(0)
            if flight.end_s > env.now:
                yield StepTimeout(env, flight.end_s - env.now)
            if env.peek() <= env.now:
                yield env.timeout(0)  # arrivals and transfers due at this instant first
            if self._aborts:  # aborts that came while the batch ran (the aborts queue)
                self._apply_aborts()
            now = env.now
            kvo = self._connector_output(now)
            # The report is known only now; the batch carries it to update_from_output.
            flight.batch.kv_connector_output = kvo
            applied, result = queue.apply_oldest()
            out = applied.scheduler_output
            self._merge_carried(result, out.total_num_scheduled_tokens > 0)
            self._connector_after_output()
            if out.total_num_scheduled_tokens == 0:
                if self.check:
                    scheduler.check_invariants()
                self._finish_requests(result.finished_requests, result, now)
                if self._no_progress(kvo):
                    yield from self._connector_sleep()
                continue
            finished = self._record_step(
                out,
                result,
                flight.start_s,
                flight.end_s - flight.start_s,
                flight.num_prefill,
                flight.num_decode,
                now,
            )
            if self.check:
                scheduler.check_invariants()
            self._finish_requests(finished, result, now)

    def _launch(self, batch: Batch) -> _Flight:
        """A batch just scheduled: when it reaches the GPU, its connector's worker
        side, its duration and token counts."""
        out = batch.scheduler_output
        t0 = max(self.env.now, self._gpu_free)
        start = self._connector_start(out, t0)
        if out.total_num_scheduled_tokens:
            duration, prefill, decode, _ = self.costs.cost(out, batch.sampled_token_ids)
        else:
            duration, prefill, decode = 0.0, 0, 0
        end = start + duration
        self._gpu_free = end
        return _Flight(batch, t0, end, prefill, decode)

    def _merge_carried(self, result: EngineStepOutput, recorded: bool) -> None:
        """Lookups of steps or batches that scheduled no token (``recorded`` false)
        count in the next recorded step (steps.csv has no row for them); both loops
        with a connector merge them here."""
        stats = result.prefix_cache_stats
        if not recorded:
            if stats is not None:
                carried = self._carried
                self._carried = stats if carried is None else carried.merged(stats)
            return
        carried = self._carried
        if carried is not None:
            result.prefix_cache_stats = carried if stats is None else carried.merged(stats)
            self._carried = None

    def _no_progress(self, kvo: KVConnectorOutput) -> bool:
        """After a batch without tokens: True when nothing it reported, nothing that
        arrived and no batch still computing can change what the next ``schedule()``
        does (so the engine would spin at this instant)."""
        if kvo.completed_jobs or kvo.finished_recving or kvo.finished_sending:
            return False
        if self._pending or self._aborts or self._connector_pending():
            return False
        return self._gpu_free <= self.env.now and self.scheduler.has_requests()

    def _connector_sleep(self) -> Generator[simpy.Event, Any, None]:
        """Wait for what can change the state (:meth:`_connector_wait`), or raise
        SimulationStuck when nothing can."""
        wait = self._connector_wait()
        if wait is not None:
            yield wait
            return
        scheduler = self.scheduler
        if not self.arrivals_done():
            yield self._idle()
            return
        if scheduler.waiting and not scheduler.running:
            raise self._no_fit()
        raise SimulationStuck(
            f"replica {self.replica_id}: the KV connector holds requests with nothing in flight"
        )

    def _connector_step_alone(self) -> Generator[simpy.Event, Any, None]:
        """One engine iteration with nothing in flight and no request to schedule,
        for the connector's work alone: ``schedule()``, the worker side at the
        GPU's next free instant, its report, ``update_from_output``."""
        env = self.env
        scheduler = self.scheduler
        out = scheduler.schedule()
        start = self._connector_start(out, max(env.now, self._gpu_free))
        if start > env.now:
            yield StepTimeout(env, start - env.now)
        now = env.now
        result = scheduler.update_from_output(out, {}, self._connector_output(now))
        self._merge_carried(result, False)
        self._connector_after_output()
        self._finish_requests(result.finished_requests, result, now)

    def _end_sync_step(
        self,
        out: SchedulerOutput,
        sampled: dict[str, Any],
        start: float,
        duration: float,
        prefill: int,
        decode: int,
    ) -> None:
        """The end of a synchronous step that scheduled tokens, now: the connector's
        report and the sampled tokens applied, the carried lookups merged, the step
        recorded and its finished requests handled (both synchronous loops)."""
        scheduler = self.scheduler
        now = self.env.now
        result = scheduler.update_from_output(out, sampled, self._connector_output(now))
        self._merge_carried(result, True)
        self._connector_after_output()
        finished = self._record_step(out, result, start, duration, prefill, decode, now)
        if self.check:
            scheduler.check_invariants()
        self._finish_requests(finished, result, now)

    def _finish_requests(
        self, finished: list[Request], result: EngineStepOutput, now: float
    ) -> None:
        """Record the requests that finished in a batch applied at ``now`` (s)."""
        for req in finished:
            self.finish_request(req, now)

    # The connector's worker side: what each connector's engine defines.

    def _run_steps(self) -> Generator[simpy.Event, Any, None]:
        """The synchronous loop (``EngineCore.step``) with this engine's connector."""
        raise NotImplementedError

    def _connector_start(self, out: SchedulerOutput, t0: float) -> float:
        """The worker side of a step's or batch's connector metadata when it reaches
        the GPU at ``t0`` (s); returns when its compute can start (s)."""
        raise NotImplementedError

    def _connector_output(self, now: float) -> KVConnectorOutput:
        """What the workers report in the output of a step or batch that ends at
        ``now`` (s)."""
        raise NotImplementedError

    def _connector_after_output(self) -> None:
        """After a step's or batch's output was applied."""
        raise NotImplementedError

    def _connector_pending(self) -> bool:
        """Whether the connector has work for the next batch even with no request."""
        raise NotImplementedError

    def _connector_wait(self) -> simpy.Event | None:
        """What to wait for when no batch can progress; None when nothing the
        connector has in flight can change the state."""
        raise NotImplementedError
