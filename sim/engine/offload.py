"""A replica with vLLM's CPU KV offload tier (``--kv-offloading-size``), in both loops.

An :class:`OffloadReplicaEngine` is a :class:`sim.engine.connector.ConnectorEngine`
whose scheduler has kvcore's
:class:`kvcore.offloading_connector.OffloadingConnectorScheduler`; its worker side is a
:class:`sim.engine.offload_worker.OffloadWorker`, which times the copies on the replica's host
link (:mod:`sim.engine.offload_transfers`). With async scheduling its loop is
:meth:`sim.engine.connector.ConnectorEngine._run_batch_queue_connector`; without, the
synchronous loop here (:meth:`OffloadReplicaEngine._run_steps`). Fast-forward is off
(every step has its transfers). Units: seconds.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from kvcore.offloading_connector import (
    KVConnectorOutput,
    OffloadingConnectorMetadata,
    OffloadingConnectorScheduler,
)
from kvcore.sched_output import SchedulerOutput
from sim.engine.connector import ConnectorEngine
from sim.engine.offload_worker import OffloadWorker
from sim.engine.regime import EngineRegime
from sim.engine.replica_parts import ReplicaParts
from sim.engine.stretches import StepTimeout
from sim.errors import SimulationStuck
from sim.spec_decode.engine import SpecDecodeRun


class OffloadReplicaEngine(ConnectorEngine):
    """A replica with the CPU KV offload tier."""

    def __init__(
        self,
        parts: ReplicaParts,
        offload: OffloadWorker,
        regime: EngineRegime | None = None,
        spec: SpecDecodeRun | None = None,
    ) -> None:
        """:class:`sim.engine.replica.ReplicaEngine`'s arguments (no DP lockstep: it runs
        without a connector), and ``offload``, the tier's worker side on the
        replica's host link (with a scheduler that has the offloading connector)."""
        if not isinstance(parts.scheduler.connector, OffloadingConnectorScheduler):
            raise ValueError("KV offload runs with a scheduler with the offloading connector")
        super().__init__(parts, regime, spec)
        self.offload = offload

    def _run_steps(self) -> Generator[simpy.Event, Any, None]:
        """The synchronous loop with the CPU KV offload tier (vLLM 0.33.0's
        ``EngineCore.step`` with the ``OffloadingConnector``); timing as
        :mod:`sim.engine.offload_transfers` plans it, after vLLM's
        ``OffloadingConnectorWorker`` (:class:`sim.engine.offload_worker.OffloadWorker`):

        at a step's start ``t0`` this step's ``jobs_to_flush`` stores and the stores
        the step before deferred are submitted (``handle_preemptions``), the step waits
        for the flushed jobs, then submits its loads (``start_kv_transfers``) and
        computes; its own stores wait for the next step (``prepare_store_kv``). At the
        step's end the transfers ended by then are its ``KVConnectorOutput``
        (``get_finished``). A step that schedules no token still runs the connector
        (vLLM's ``kv_connector_no_forward``): when nothing ended, the engine sleeps until
        the next transfer ends or a request arrives."""
        env = self.env
        scheduler = self.scheduler
        worker = self.offload
        while True:
            if self._pending:
                self._admit_pending()
            if self._aborts:
                self._apply_aborts()
            if not scheduler.has_requests() and not worker.has_deferred_stores:
                if self.arrivals_done() and not self._pending:
                    return
                yield self._idle()
                continue
            out = scheduler.schedule()
            t0 = env.now
            start = self._connector_start(out, t0)
            if out.total_num_scheduled_tokens == 0:
                if start > t0:
                    yield StepTimeout(env, start - t0)
                kvo = self._connector_output(env.now)
                # Earlier finishes only; the lookups of requests that started a load in
                # this step count in the next recorded step (steps.csv has no row here).
                self._merge_carried(scheduler.update_from_output(out, {}, kvo), False)
                self._connector_after_output()
                if kvo.completed_jobs or worker.has_deferred_stores:
                    continue  # progress (or stores to submit): schedule again now
                wait = self._connector_wait()
                if wait is not None:  # the next transfer's end, or an arrival
                    yield wait
                    continue
                if (yield from self._after_empty_step()):
                    continue
                if not scheduler.running and not self._pending and scheduler.has_requests():
                    if self.arrivals_done():  # nothing left that could change the state
                        raise SimulationStuck(
                            f"replica {self.replica_id}: the KV offload connector holds "
                            "requests with no transfer in flight"
                        )
                    yield self._idle()
                continue
            duration, prefill, decode, sampled = self.costs.cost(out)
            yield StepTimeout(env, start + duration - t0)
            if env.peek() <= env.now:
                yield env.timeout(0)  # arrivals due at this instant join first
            if self._aborts:
                self._apply_aborts()
            self._end_sync_step(out, sampled, t0, env.now - t0, prefill, decode)

    # The connector's worker side, in both loops.

    def _connector_start(self, out: SchedulerOutput, t0: float) -> float:
        """The worker side of a step's or batch's connector metadata when it reaches
        the GPU at ``t0`` (s); returns when its compute can start (s)."""
        meta = out.kv_connector_metadata
        assert isinstance(meta, OffloadingConnectorMetadata)
        return self.offload.start(meta, t0)

    def _connector_output(self, now: float) -> KVConnectorOutput:
        """What the workers report in the output of a step or batch that ends at
        ``now`` (s)."""
        connector = self.scheduler.connector
        assert isinstance(connector, OffloadingConnectorScheduler)
        return self.offload.finished(now, connector.num_workers)

    def _connector_after_output(self) -> None:
        """After a step's or batch's output was applied: the CPU tier's peak."""
        connector = self.scheduler.connector
        assert isinstance(connector, OffloadingConnectorScheduler)
        self.offload.note_cpu_usage(connector)

    def _connector_pending(self) -> bool:
        """Whether the connector has work for the next batch even with no request."""
        return self.offload.has_deferred_stores

    def _connector_wait(self) -> simpy.Event | None:
        """What to wait for when no batch can progress: the next transfer's end or an
        arrival; None when no transfer is in flight."""
        next_end = self.offload.next_done_s()
        if next_end is None:
            return None
        return self.env.timeout(max(0.0, next_end - self.env.now)) | self._idle()
