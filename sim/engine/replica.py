"""One vLLM replica as a SimPy process: schedule, time the step, apply the output.

:class:`ReplicaEngine` is vLLM 0.33.0's synchronous loop (``EngineCore.step``, a
:class:`kvcore.scheduler.Scheduler`): requests that arrived while a step ran are added
before the next ``schedule()``; the step's duration comes from the latency model;
sampled tokens (a fixed id, EOS ignored) are applied with ``update_from_output`` at the
end of the step. Its subclasses run the other loops:
:class:`sim.engine.replica_async.AsyncReplicaEngine` async scheduling, vLLM 0.33.0's
default, and, for a scheduler with a KV connector (the CPU KV offload tier's, P/D's),
:class:`sim.engine.connector.ConnectorEngine` (the async loop with a connector),
:class:`sim.engine.offload.OffloadReplicaEngine` and :class:`sim.engine.pd.PDReplicaEngine`.
What every loop shares (arrivals, client timeouts and aborts, the records of finished
requests) is the base class, :class:`sim.engine.replica_requests.ReplicaRequests`.

Fast-forward (on by default) advances stretches of decode-only steps at once, exactly
as the loop would step them (same records, byte for byte): in the synchronous loop
with :mod:`kvcore.fast_forward` (also with several replicas), in the async loop with
:mod:`kvcore.fast_forward_async` (one replica: iterations that each schedule one
token per running request, with placeholders, and apply the batch in flight). Both
stop at the first step in which requests finish, before a step whose blocks the pool
cannot serve, and at the next SimPy event (an arrival, a timer); see
:mod:`sim.engine.stretches`. Whether an engine fast-forwards, and how (one writer of
the records or several), is decided once where the engines are built
(:mod:`sim.engine.regime`) and passed in. Fast-forward is off with a KV connector.

With speculative decoding (``--speculative-config``, both loops) the fake model samples
``1 + a`` tokens per decoding request with drafts (``a`` accepted, drawn by the
replica's acceptance model) and the drafter's proposals and cost come from
:class:`sim.spec_decode.engine.SpecDecodeRun`; fast-forward is off (every step is stepped:
its stretches assume one token per request per step).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from kvcore.async_scheduler import AsyncScheduler
from kvcore.batch_queue import BatchQueue, sample_fixed_token
from kvcore.offloading_connector import OffloadingConnectorScheduler
from kvcore.request import Request
from kvcore.sched_output import EngineStepOutput, SchedulerOutput
from sim.engine.dp_lockstep import LockstepForwards
from sim.engine.regime import EngineRegime, decide_regime, stepping_part
from sim.engine.replica_parts import ReplicaParts
from sim.engine.replica_requests import ReplicaRequests
from sim.engine.step_cost import StepCoster
from sim.engine.step_timing import StretchTimer, make_stretch_timer
from sim.engine.stretches import SAMPLE_TOKEN_ID, StepTimeout, StretchRunner
from sim.errors import SimulationStuck
from sim.records.decision_line import decision_line
from sim.records.step_row import StepRow
from sim.spec_decode.engine import SpecDecodeRun


class ReplicaEngine(ReplicaRequests):
    """Drives one kvcore Scheduler in simulated time (seconds), in the synchronous loop."""

    def __init__(
        self,
        parts: ReplicaParts,
        regime: EngineRegime | None = None,
        spec: SpecDecodeRun | None = None,
        lockstep: LockstepForwards | None = None,
    ) -> None:
        """``regime``: what the engine may do at once, decided where the engines are
        built (:func:`sim.engine.regime.decide_regime`); None: stepped (no
        fast-forward), as the only writer. ``spec``: speculative decoding (with a scheduler
        that has the same speculative config); ``lockstep``: the forward time line of
        this replica's DP group, a MoE model's DP ranks stepping together
        (:mod:`sim.engine.dp_lockstep`; no connector)."""
        super().__init__(parts)
        env = parts.env
        scheduler = parts.scheduler
        latency_model = parts.latency_model
        workload = parts.workload
        self.latency_model = latency_model
        self.steps = parts.steps
        self.check = parts.check
        self.decisions = parts.decisions
        if regime is None:
            regime = decide_regime(
                fast_forward=False,
                num_replicas=1,
                scheduler=scheduler,
                latency_model=latency_model,
                workload=workload,
            )
        stepped_by = stepping_part(
            offload=isinstance(scheduler.connector, OffloadingConnectorScheduler),
            spec=spec is not None,
            lockstep=lockstep is not None,
        )
        if regime.fast_forward and stepped_by is not None:
            raise ValueError(f"fast-forward does not run with {stepped_by} (decide_regime)")
        # The regime's answers, as the engine's own fields (read every step).
        self._chained: bool = regime.chained
        self.spec = spec
        # vLLM 0.33.0's default loop when the scheduler is an AsyncScheduler.
        self.batch_queue: BatchQueue | None = (
            BatchQueue(
                scheduler, sample_fixed_token(SAMPLE_TOKEN_ID) if spec is None else spec.sample
            )
            if isinstance(scheduler, AsyncScheduler)
            else None
        )
        self.lockstep = lockstep
        if lockstep is not None and scheduler.connector is not None:
            raise ValueError("DP lockstep runs without a KV connector")
        # A decode computes the last known token; with async scheduling the tokens in
        # flight (output placeholders, the step's own included) count as known.
        self.costs = StepCoster(
            scheduler,
            latency_model,
            decode_lag=2 if self.batch_queue is not None else 1,
            vector_decode=regime.vector_decode,
            spec=spec,
        )
        self.pool = scheduler.kv_cache_manager.block_pool
        self.num_steps = 0
        # The async loops: when the last batch launched ends (s).
        self._gpu_free = env.now
        # Fast-forward, when the regime allows it: the stretch runner composed in.
        self.stretches: StretchRunner | None = (
            self._make_stretches(make_stretch_timer(latency_model, self.costs.decode_time), regime)
            if regime.fast_forward
            else None
        )
        self.process = env.process(self.run())

    def _make_stretches(self, timer: StretchTimer, regime: EngineRegime) -> StretchRunner:
        """This engine's stretch runner (the async loop's engine makes its own; this
        class's :meth:`run` refuses an ``AsyncScheduler``)."""
        return StretchRunner(self, timer, regime)

    def run(self) -> Generator[simpy.Event, Any, None]:
        if self.batch_queue is not None:
            raise TypeError("an AsyncScheduler's engine is an AsyncReplicaEngine")
        scheduler = self.scheduler
        stretches = self.stretches
        while True:
            if self._pending:
                self._admit_pending()
            if self._aborts:
                self._apply_aborts()
            if not scheduler.has_requests():
                if self.arrivals_done() and not self._pending:
                    return
                yield self._idle()
                continue
            if stretches is not None and (yield from stretches.try_fast_forward()):
                continue
            if self.lockstep is not None and (yield from self.lockstep.wait_while_busy()):
                continue
            out = scheduler.schedule()
            if out.total_num_scheduled_tokens == 0:
                scheduler.update_from_output(out, {})  # reports earlier finishes only
                yield from self._after_empty_step()
                continue
            yield from self._execute(out)

    def _no_fit(self) -> SimulationStuck:
        """The error of an engine whose waiting requests can never fit in its KV cache."""
        return SimulationStuck(
            f"replica {self.replica_id}: {len(self.scheduler.waiting)} requests wait "
            "but none fits in the KV cache"
        )

    def _after_empty_step(self) -> Generator[simpy.Event, Any, bool]:
        """After a synchronous step that scheduled no token: with requests running or
        waiting (not only arrivals yet to be admitted), wait for an arrival when none
        runs, or raise :meth:`_no_fit` when no arrival can come. True when that was
        the state."""
        scheduler = self.scheduler
        if not (scheduler.running or (scheduler.waiting and not self._pending)):
            return False
        if not scheduler.running:
            if scheduler.waiting and self.arrivals_done():
                raise self._no_fit()
            yield self._idle()
        return True

    def _execute(self, out: SchedulerOutput) -> Generator[simpy.Event, Any, None]:
        """Run one scheduled step: wait its duration, then apply its output.

        With fast-forward, one replica and a workload that does not react to finishes,
        a step that ends before the next SimPy event is applied at once and the decode
        stretches after it are chained on, in one wait: nothing can look at this
        replica before then, and what it does after the step is what the loop would do
        at the step's end."""
        env = self.env
        start = env.now
        duration, prefill, decode, sampled = self.costs.cost(out)
        if self._chained:
            end = start + duration  # where the step's timeout would land
            until = env.peek()
            if end < until:
                stretches = self.stretches
                assert stretches is not None  # chained: a regime that fast-forwards
                finished = self._apply_step(out, start, duration, prefill, decode, sampled, end)
                done = [(req, end) for req in finished]
                chained = stretches.chain_stretches(end, until, done)
                yield from stretches.finish_at(end if chained is None else chained, done)
                return
        if self.lockstep is not None:  # the group's forward: with its slowest rank's
            fwd = self.lockstep.forward(duration)
            yield fwd.done
            start, duration = fwd.start, fwd.duration
        else:
            yield StepTimeout(env, duration)
        if env.peek() <= env.now:
            # Let arrivals due at this instant join before the next step (with no other
            # event at this instant, the zero timeout would change nothing).
            yield env.timeout(0)
        if self._aborts:  # aborts that came while the step ran (the aborts queue)
            self._apply_aborts()
        now = env.now
        finished = self._apply_step(out, start, duration, prefill, decode, sampled, now)
        if self.check:
            self.scheduler.check_invariants()
        for req in finished:
            self.finish_request(req, now)

    def _apply_step(
        self,
        out: SchedulerOutput,
        start: float,
        duration: float,
        prefill: int,
        decode: int,
        sampled: dict[str, tuple[int]],
        now: float,
    ) -> list[Request]:
        """Apply a step's output at its end ``now`` and write its records; return the
        requests that finished in it (not yet recorded)."""
        result = self.scheduler.update_from_output(out, sampled)
        if self.spec is not None:
            self.spec.after_step(self.scheduler, out, result, sampled, now)
        return self._record_step(out, result, start, duration, prefill, decode, now)

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
        """Write the records of a step whose output ``result`` was applied at ``now``;
        return the requests that finished in it (not yet recorded)."""
        scheduler = self.scheduler
        meta = self._meta
        for rid in result.new_token_ids:
            m = meta[rid]
            if m.first_token_s < 0:
                m.first_token_s = now
        pool = self.pool
        stats = result.prefix_cache_stats  # the scheduler logs stats (log_stats=True)
        assert stats is not None
        num_free = pool.get_num_free_blocks()
        row = StepRow(
            replica=self.replica_id,
            step=self.num_steps,
            start_s=start,
            duration_s=duration,
            num_running=len(scheduler.running),
            num_waiting=len(scheduler.waiting),
            num_prefill_tokens=prefill,
            num_decode_tokens=decode,
            num_preempted=len(out.preempted_req_ids),
            kv_usage=pool.get_usage(),
            num_free_blocks=num_free,
            num_cached_blocks=pool.num_cached_blocks,
            prefix_queries=stats.queries + stats.preempted_queries,
            prefix_hits=stats.hits + stats.preempted_hits,
            num_cached_free_blocks=pool.num_cached_free_blocks,
        )
        self.steps.add(row)
        if self.decisions is not None:
            self.decisions.write(
                decision_line(
                    self.replica_id,
                    self.num_steps,
                    out.num_scheduled_tokens,
                    out.preempted_req_ids,
                    result.finished_req_ids,
                    num_free,
                )
            )
        self.num_steps += 1
        return result.finished_requests

    # -- what the stretch runner (sim.engine.stretches) reads and changes ----------

    @property
    def gpu_free(self) -> float:
        """The async loop: when the last batch launched ends (s)."""
        return self._gpu_free

    @property
    def num_fast_forwarded(self) -> int:
        """Steps advanced by fast-forward."""
        return 0 if self.stretches is None else self.stretches.num_fast_forwarded

    @property
    def num_stretches(self) -> int:
        """Fast-forward stretches (of one step or more)."""
        return 0 if self.stretches is None else self.stretches.num_stretches

    def claim_steps(self, k: int) -> int:
        """Number ``k`` steps advanced at once: the first one's number."""
        step0 = self.num_steps
        self.num_steps += k
        return step0
