"""One P/D instance (prefill or decode) as a SimPy process, with its NIXL worker side.

A :class:`PDReplicaEngine` is a :class:`sim.engine.connector.ConnectorEngine` whose scheduler has
kvcore's :class:`kvcore.nixl_connector.NixlConnectorScheduler` (``kv_producer`` on a
prefill instance, ``kv_consumer`` on a decode one). With async scheduling (vLLM
0.33.0's default) its loop is
:meth:`sim.engine.connector.ConnectorEngine._run_batch_queue_connector`
(the batch queue; a batch's worker side below runs when the GPU reaches the batch and
its report comes with the batch's output; kvcore defers the decode side's frees and
drops a preempted producer's output in flight, as vLLM). With
``--no-async-scheduling`` it is vLLM 0.33.0's synchronous ``EngineCore.step`` with a
KV connector:

* ``schedule()``, then the worker side of the step's connector metadata at the step's
  start ``t0`` (a decode instance posts one read per request in ``reqs_to_recv`` that
  waits for its KV, timed by :class:`sim.engine.pd_transfers.PDLinks`);
* the step computes for the latency model's duration; at its end, the reads that
  ended by then are its ``KVConnectorOutput`` (``finished_recving`` here,
  ``finished_sending`` on the prefill instance read from), passed to
  ``update_from_output``;
* a step that schedules no token still runs the connector (vLLM's
  ``kv_connector_no_forward``): with nothing reported the engine sleeps until a read
  ends or a request arrives (a prefill instance that only holds finished requests'
  blocks waits so for the decode side's reads).

What the proxy (:class:`sim.engine.pd_cluster.PDCluster`) sees: a prefill instance hands
each finished request (with the ``kv_transfer_params`` its scheduler returned) to the
proxy instead of the workload and writes no ``requests.csv`` row; a decode instance
records the request (its TTFT from the original arrival) and tells the workload.

Fast-forward is off (every step is stepped, with its transfers); timeouts, the CPU
KV tier and speculative decoding are refused before a P/D run starts.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Literal

import simpy

from kvcore.kv_connector_output import KVConnectorOutput
from kvcore.nixl_connector import NixlConnectorMetadata
from kvcore.request import LoRARequest, Request
from kvcore.sched_output import EngineStepOutput, SchedulerOutput
from sim.engine.connector import ConnectorEngine
from sim.engine.replica_parts import ReplicaParts, RequestMeta
from sim.engine.stretches import StepTimeout

if TYPE_CHECKING:
    from sim.engine.pd_cluster import PDCluster

Role = Literal["prefill", "decode"]

PREFILL_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False}
"""What the proxy asks of a prefill instance (with ``max_tokens`` 1)."""


class PDReplicaEngine(ConnectorEngine):
    """One prefill or decode instance; ``replica_id`` is its id in steps.csv
    (prefill instances first), ``index`` its index within its pool."""

    def __init__(
        self,
        parts: ReplicaParts,
        role: Role,
        index: int,
        proxy: PDCluster,
        arrivals_done: Callable[[], bool],
    ) -> None:
        """``parts``: the instance's (its ``replica_id`` its id in steps.csv);
        ``proxy``: what this instance reports to (:class:`sim.engine.pd_cluster.PDCluster`);
        ``arrivals_done``: True once no request can reach this instance any more."""
        # Stepped: a P/D instance steps every step with its transfers.
        super().__init__(parts)
        self.role = role
        self.index = index
        self.proxy = proxy
        self.arrivals_done = arrivals_done
        self.busy_s = 0.0  # seconds of steps that scheduled tokens
        self.waiting_sum = 0  # sum over recorded steps of waiting requests
        self.waiting_max = 0
        self._params: dict[str, dict[str, Any]] = {}  # decode: request -> its params
        self._recv_done: set[str] = set()
        self._sent_done: set[str] = set()

    # -- what the proxy and the links call ------------------------------------------

    def submit_remote(self, sim_request: Any, params: dict[str, Any]) -> None:
        """Decode side: a request whose prompt a prefill instance computed, with the
        ``kv_transfer_params`` to read it by."""
        self._params[sim_request.request_id] = params
        self.submit(sim_request)

    def report_recv(self, request_id: str) -> None:
        """Decode side: the read of ``request_id`` ended (reported at the next step end)."""
        self._recv_done.add(request_id)
        self.poke()

    def report_sent(self, request_id: str) -> None:
        """Prefill side: the decode side read ``request_id``'s blocks."""
        self._sent_done.add(request_id)
        self.poke()

    def poke(self) -> None:
        """Wake the loop if it sleeps (a read ended, or arrivals may be over)."""
        if not self._wake.triggered:
            self._wake.succeed()

    # -- the loop ------------------------------------------------------------------

    def _admit_pending(self) -> None:
        now = self.env.now
        for sr in self._pending:
            rid = sr.request_id
            prefill = self.role == "prefill"
            req = Request(
                rid,
                sr.prompt_token_ids,
                1 if prefill else sr.max_tokens,
                arrival_time=now,
                priority=sr.priority,
                lora_request=LoRARequest.from_id(sr.lora_id) if sr.lora_id else None,
                cache_salt=sr.cache_salt,
                block_hasher=self.hasher,
                block_hashes=sr.prompt_block_hashes or (),
                kv_transfer_params=dict(PREFILL_PARAMS) if prefill else self._params.pop(rid),
            )
            self._meta[rid] = RequestMeta(sr.arrival_s, req.num_prompt_tokens)
            self.scheduler.add_request(req)
        self._pending.clear()

    def _collect(self) -> KVConnectorOutput:
        """The step's ``KVConnectorOutput``: the reads reported since the last one."""
        kvo = KVConnectorOutput(finished_recving=self._recv_done, finished_sending=self._sent_done)
        self._recv_done = set()
        self._sent_done = set()
        return kvo

    def _start_step(self, meta: Any, scheduled: dict[str, int], t0: float) -> None:
        """The worker side of a step's connector metadata, at its start ``t0`` (s)."""
        assert isinstance(meta, NixlConnectorMetadata)
        if self.role == "prefill":
            self.proxy.note_prefill_scheduled(scheduled, t0)
            return
        for rid, recv in meta.reqs_to_recv.items():
            if recv.awaiting_kvs:
                blocks = sum(len(g) for g in recv.local_block_ids)
                self.proxy.start_read(rid, self.index, blocks, t0)

    def _run_steps(self) -> Generator[simpy.Event, Any, None]:
        """The synchronous loop with the NIXL connector (see the module docstring)."""
        env = self.env
        scheduler = self.scheduler
        while True:
            if self._pending:
                self._admit_pending()
            if not scheduler.has_requests() and not self._connector_pending():
                if self.arrivals_done() and not self._pending:
                    return
                yield self._idle()
                continue
            out = scheduler.schedule()
            t0 = env.now
            self._start_step(out.kv_connector_metadata, out.num_scheduled_tokens, t0)
            if out.total_num_scheduled_tokens == 0:
                kvo = self._collect()
                self._merge_carried(scheduler.update_from_output(out, {}, kvo), False)
                if (
                    kvo.finished_recving
                    or kvo.finished_sending
                    or self._pending
                    or not scheduler.has_requests()  # it only reported earlier finishes
                ):
                    continue
                yield self._idle()  # a read's end or an arrival wakes it
                continue
            duration, prefill, decode, sampled = self.costs.cost(out)
            yield StepTimeout(env, duration)
            if env.peek() <= env.now:
                yield env.timeout(0)  # arrivals and reads due at this instant first
            self._end_sync_step(out, sampled, t0, duration, prefill, decode)

    def _record_step(
        self,
        out: SchedulerOutput,
        result: EngineStepOutput,
        start: float,
        duration: float,
        prefill: int,
        decode: int,
        now: float,
    ) -> list[Request]:
        """:meth:`ReplicaEngine._record_step`, counting the instance's busy seconds
        and waiting requests (the P/D summary's)."""
        self.busy_s += duration
        waiting = len(self.scheduler.waiting)
        self.waiting_sum += waiting
        self.waiting_max = max(self.waiting_max, waiting)
        return super()._record_step(out, result, start, duration, prefill, decode, now)

    def _finish_requests(
        self, finished: list[Request], result: EngineStepOutput, now: float
    ) -> None:
        """A prefill instance hands its finished requests to the proxy; a decode one
        records them and tells the proxy."""
        for req in finished:
            rid = req.request_id
            if self.role == "prefill":
                self._meta.pop(rid)
                self.proxy.prefill_finished(rid, result.kv_transfer_params.get(rid), req, now)
            else:
                first = self._meta[rid].first_token_s
                self.finish_request(req, now)
                self.proxy.decode_finished(rid, first, now)

    # -- the connector's worker side in the async loop ------------------------------

    def _connector_start(self, out: SchedulerOutput, t0: float) -> float:
        """The NIXL worker side of a batch when it reaches the GPU at ``t0`` (s): a
        decode instance posts its reads then (in time order across instances, so at
        ``t0`` itself when that is later than now); the compute starts at ``t0``."""
        meta = out.kv_connector_metadata
        scheduled = out.num_scheduled_tokens
        env = self.env
        if t0 <= env.now:
            self._start_step(meta, scheduled, t0)
        else:
            timer = env.timeout(t0 - env.now)
            timer.callbacks.append(lambda _event: self._start_step(meta, scheduled, t0))
        return t0

    def _connector_output(self, now: float) -> KVConnectorOutput:
        """The reads reported by ``now`` (s), the batch's end."""
        return self._collect()

    def _connector_after_output(self) -> None:
        """Nothing to track after a batch's output (reads are timed by the proxy)."""

    def _connector_pending(self) -> bool:
        """Reads reported and not yet delivered to the scheduler."""
        return bool(self._recv_done or self._sent_done)

    def _connector_wait(self) -> simpy.Event | None:
        """A read's end (``poke``) or an arrival wakes the instance."""
        return self._idle()
