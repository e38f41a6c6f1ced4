"""One vLLM replica as a SimPy process: schedule, time the step, apply the output.

Two loops, as vLLM 0.33.0's engine core has:

- **synchronous** (``EngineCore.step``, a :class:`kvcore.scheduler.Scheduler`):
  requests that arrived while a step ran are added before the next ``schedule()``;
  the step's duration comes from the latency model; sampled tokens (a fixed id, EOS
  ignored) are applied with ``update_from_output`` at the end of the step.
- **async scheduling**, vLLM 0.33.0's default (``EngineCore.step_with_batch_queue``,
  a :class:`kvcore.async_scheduler.AsyncScheduler` behind a
  :class:`kvcore.batch_queue.BatchQueue` of 2 batches): step N+1 is scheduled, with
  output placeholders, as soon as step N is launched; the GPU runs batches one after
  another; the engine then waits for the oldest batch, applies its output at its end
  and schedules the next. A request that arrives while step N runs is added when N's
  output is applied and scheduled in N+2, one step later than the synchronous loop
  would run it. Host time (scheduling, input preparation, output processing) is not
  charged separately: it overlaps the GPU's in this loop and is part of the latency
  model's per-step overhead in both.

Fast-forward (on by default) advances stretches of decode-only steps at once, exactly
as the loop would step them (same records, byte for byte): in the synchronous loop
with :mod:`kvcore.fast_forward` (also with several replicas), in the async loop with
:mod:`kvcore.fast_forward_async` (one replica: iterations that each schedule one
token per running request, with placeholders, and apply the batch in flight). Both
stop at the first step in which requests finish, before a step whose blocks the pool
cannot serve, and at the next SimPy event (an arrival, a timer); see
:mod:`sim.engine.stretches`. Whether an engine fast-forwards, and how (one writer of
the records or several), is decided once where the engines are built
(:mod:`sim.engine.regime`) and passed in.

A replica whose scheduler has a KV connector (the CPU KV offload tier's, P/D's) runs
in a subclass with the connector's worker side: :class:`sim.engine.connector.ConnectorEngine`
(the async loop with a connector), :class:`sim.engine.offload.OffloadReplicaEngine`,
:class:`sim.engine.pd.PDReplicaEngine`. Fast-forward is off there.

With speculative decoding (``--speculative-config``, both loops) the fake model samples
``1 + a`` tokens per decoding request with drafts (``a`` accepted, drawn by the
replica's acceptance model) and the drafter's proposals and cost come from
:class:`sim.spec_decode.engine.SpecDecodeRun`; fast-forward is off (every step is stepped:
its stretches assume one token per request per step).

A request with ``timeout_s`` that has not finished ``timeout_s`` seconds after it
arrived is aborted as vLLM 0.33.0 aborts a request whose client went away: the
engine core calls ``Scheduler.finish_requests([id], FINISHED_ABORTED)``
(``EngineCore.abort_requests``), before the next ``schedule()`` (the input queue) or,
when a step is running, before that step's output is applied (the aborts queue);
output of an aborted request still in flight is dropped. A request not yet admitted
is dropped from the queue of arrivals. Fast-forward is off for such workloads (a
stretch could not stop at an abort in the middle of a step).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import IO, Any

import simpy

from kvcore.async_scheduler import AsyncScheduler
from kvcore.batch_queue import BatchQueue, sample_fixed_token
from kvcore.block_hashing import BlockHasher, FastBlockHasher
from kvcore.offloading_connector import OffloadingConnectorScheduler
from kvcore.request import LoRARequest, Request, RequestStatus
from kvcore.sched_output import EngineStepOutput, SchedulerOutput
from kvcore.scheduler import Scheduler
from sim.engine.dp_lockstep import LockstepForwards, RankBatches
from sim.engine.regime import EngineRegime, decide_regime, stepping_part
from sim.engine.step_cost import StepCoster
from sim.engine.step_timing import make_stretch_timer
from sim.engine.stretches import SAMPLE_TOKEN_ID, StepTimeout, StretchRunner
from sim.engine.stretches_async import AsyncStretchRunner
from sim.errors import SimulationStuck
from sim.records.decision_line import decision_line
from sim.records.recorders import RequestRecorder, StepRecorder
from sim.records.step_row import StepRow
from sim.spec_decode.engine import SpecDecodeRun


def kvcore_request(sr: Any, now: float, hasher: BlockHasher) -> Request:
    """The kvcore ``Request`` of a workload request ``sr`` arriving at ``now`` (s),
    hashed into blocks by ``hasher``."""
    return Request(
        sr.request_id,
        sr.prompt_token_ids,
        sr.max_tokens,
        arrival_time=now,
        priority=sr.priority,
        lora_request=LoRARequest.from_id(sr.lora_id) if sr.lora_id else None,
        cache_salt=sr.cache_salt,
        block_hasher=hasher,
        block_hashes=sr.prompt_block_hashes or (),
    )


class _Meta:
    __slots__ = ("arrival_s", "first_token_s", "prompt_tokens")

    def __init__(self, arrival_s: float, prompt_tokens: int) -> None:
        self.arrival_s = arrival_s
        self.first_token_s = -1.0
        self.prompt_tokens = prompt_tokens


@dataclass(frozen=True)
class ReplicaParts:
    """What every replica's engine is built from (:class:`ReplicaEngine` and its
    subclasses; the cluster or the P/D proxy makes one per replica)."""

    env: simpy.Environment
    replica_id: int
    """The replica's id in steps.csv and requests.csv."""
    scheduler: Scheduler
    latency_model: Any
    hasher: BlockHasher | FastBlockHasher
    steps: StepRecorder
    requests: RequestRecorder
    workload: Any
    check: bool = False
    """Check the scheduler's invariants after every step."""
    decisions: IO[str] | None = None
    """Where to write decisions.jsonl's lines; None: nowhere."""
    on_progress: Callable[[int], None] | None = None
    """Called with the number of requests that just finished."""


class ReplicaEngine:
    """Drives one kvcore Scheduler in simulated time (seconds)."""

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
        env = parts.env
        scheduler = parts.scheduler
        latency_model = parts.latency_model
        workload = parts.workload
        self.env = env
        self.replica_id = parts.replica_id
        self.scheduler = scheduler
        self.latency_model = latency_model
        self.hasher = parts.hasher
        self.steps = parts.steps
        self.requests = parts.requests
        self.workload = workload
        self.on_finish: Callable[[str, list[int], float], None] = workload.on_finish
        self.arrivals_done: Callable[[], bool] = workload.done
        self.check = parts.check
        self.decisions = parts.decisions
        self.on_progress = parts.on_progress
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
        self.max_model_len = scheduler.max_model_len
        self.pool = scheduler.kv_cache_manager.block_pool
        self.num_steps = 0
        # The async loop's batches in flight, oldest first: (start s, duration s,
        # prefill tokens, decode tokens); and when the last batch launched ends (s).
        self._in_flight: list[tuple[float, float, int, int]] = []
        self._gpu_free = env.now
        # The same with DP lockstep, on the group's forward time line.
        self._rank_batches = None if lockstep is None else RankBatches(lockstep)
        self.num_rejected = 0
        self.num_aborted = 0
        self._aborts: list[str] = []  # ids whose client gave up, not yet aborted
        self._pending: list[Any] = []
        self._meta: dict[str, _Meta] = {}
        self._wake = env.event()
        # Fast-forward, when the regime allows it: the stretch runner composed in.
        runner = StretchRunner if self.batch_queue is None else AsyncStretchRunner
        self.stretches: StretchRunner | None = (
            runner(
                self,
                make_stretch_timer(latency_model, self.costs.decode_time),
                one_writer=regime.one_writer,
                reacts_to_finish=regime.reacts_to_finish,
            )
            if regime.fast_forward
            else None
        )
        self.process = env.process(self.run())

    # -- arrivals ------------------------------------------------------------------

    def submit(self, sim_request: Any) -> None:
        """Hand a request to this replica (it joins the queue before the next step)."""
        if sim_request.num_prompt_tokens >= self.max_model_len:
            # vLLM rejects such prompts at the API; the request never runs (and its
            # token ids, when the workload defers them, are never built).
            self.num_rejected += 1
            self.on_finish(sim_request.request_id, [], self.env.now)
            return
        self._pending.append(sim_request)
        if sim_request.timeout_s is not None:
            rid = sim_request.request_id
            timer = self.env.timeout(sim_request.timeout_s)
            timer.callbacks.append(lambda _event: self._timed_out(rid))
        if not self._wake.triggered:
            self._wake.succeed()

    def _timed_out(self, rid: str) -> None:
        """The client of ``rid`` gives up now: abort it at the engine's next chance."""
        if rid in self._meta or any(sr.request_id == rid for sr in self._pending):
            self._aborts.append(rid)
            if not self._wake.triggered:
                self._wake.succeed()

    def _apply_aborts(self) -> None:
        """Abort the requests whose clients gave up, one ``finish_requests`` call each
        (in the order they timed out), as vLLM's ``EngineCore.abort_requests``."""
        now = self.env.now
        aborts, self._aborts = self._aborts, []
        for rid in aborts:
            queued = next((sr for sr in self._pending if sr.request_id == rid), None)
            if queued is not None:  # never admitted: gone before the engine saw it
                self._pending.remove(queued)
                self._meta[rid] = _Meta(queued.arrival_s, queued.num_prompt_tokens)
                self._aborted(rid, 0, 0, 0, now)
                continue
            for req in self.scheduler.finish_requests(rid, RequestStatus.FINISHED_ABORTED):
                self._aborted(
                    rid,
                    req.num_output_tokens,
                    max(req.num_cached_tokens, 0),
                    req.num_preemptions,
                    now,
                )

    def _aborted(
        self, rid: str, output_tokens: int, cached_tokens: int, preemptions: int, now: float
    ) -> None:
        m = self._meta.pop(rid)
        self.num_aborted += 1
        self.requests.add_aborted(
            rid,
            self.replica_id,
            m.arrival_s,
            m.first_token_s,
            now,
            m.prompt_tokens,
            output_tokens,
            cached_tokens,
            preemptions,
        )
        if self.on_progress is not None:
            self.on_progress(1)
        self.workload.on_abort(rid, now)

    @property
    def num_outstanding(self) -> int:
        """Requests submitted and not finished."""
        return len(self._pending) + self.scheduler.get_num_unfinished_requests()

    def _admit_pending(self) -> None:
        now = self.env.now
        for sr in self._pending:
            req = kvcore_request(sr, now, self.hasher)
            self._meta[sr.request_id] = _Meta(sr.arrival_s, req.num_prompt_tokens)
            self.scheduler.add_request(req)
        self._pending.clear()

    # -- the loop ------------------------------------------------------------------

    def _idle(self) -> simpy.Event:
        """An event that fires at the next submit, or when arrivals end."""
        self._wake = self.env.event()
        done = getattr(self.workload, "all_submitted", None)
        if done is not None and not done.triggered:
            return self._wake | done
        return self._wake

    def run(self) -> Generator[simpy.Event, Any, None]:
        if self.batch_queue is not None:
            yield from self._run_batch_queue(self.batch_queue)
            return
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
            if self.lockstep is not None and (yield from self._await_group_forward()):
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
        stretches = self.stretches  # an AsyncStretchRunner here
        rank_batches = self._rank_batches
        while True:
            if self._pending:
                self._admit_pending()
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
                and (yield from self._await_group_forward())
            ):
                continue
            batch, must_wait = queue.schedule_next()
            if batch is not None:
                out = batch.scheduler_output
                if out.total_num_scheduled_tokens:
                    duration, prefill, decode, _ = self.costs.cost(out, batch.sampled_token_ids)
                else:
                    duration, prefill, decode = 0.0, 0, 0
                if rank_batches is not None:
                    rank_batches.add(duration, prefill, decode)
                else:
                    start = max(env.now, self._gpu_free)
                    self._gpu_free = start + duration
                    timing.append((start, duration, prefill, decode))
            if not must_wait:
                continue
            if rank_batches is not None:
                fwd, prefill, decode = rank_batches.take_oldest()
                yield fwd.done
                start, duration = fwd.start, fwd.duration
                rank_batches.launch_next()  # the next batch reaches the GPU now
            else:
                start, duration, prefill, decode = timing.pop(0)
                end = start + duration
                if end > env.now:
                    yield StepTimeout(env, end - env.now)
            if env.peek() <= env.now:
                # Arrivals due at this instant join before the next schedule().
                yield env.timeout(0)
            if self._aborts:  # aborts that came while the batch ran (the aborts queue)
                self._apply_aborts()
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

    # -- DP lockstep (a MoE model's DP ranks, sim.engine.dp_lockstep) ---------------

    def _await_group_forward(self) -> Generator[simpy.Event, Any, bool]:
        """Before scheduling with nothing of its own on the GPU: while a forward of the
        group runs that this rank is not part of (it runs a dummy batch in it), wait
        for its end; True when it waited (the caller loops, admitting arrivals)."""
        lockstep = self.lockstep
        assert lockstep is not None
        until = lockstep.busy_until()
        if until <= self.env.now:
            return False
        yield StepTimeout(self.env, until - self.env.now)
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
            self._after_spec_step(self.spec, out, result, sampled, now)
        return self._record_step(out, result, start, duration, prefill, decode, now)

    def _after_spec_step(
        self,
        spec: SpecDecodeRun,
        out: SchedulerOutput,
        result: EngineStepOutput,
        sampled: dict[str, Any],
        now: float,
    ) -> None:
        """After a synchronous step's output: count its drafts, and hand the drafter's
        proposals to the scheduler (vLLM's ``EngineCore.post_step``), unless the step
        skipped the drafter."""
        spec.observe(result.spec_decoding_stats, now)
        if not out.skip_drafts:
            self.scheduler.update_draft_token_ids(spec.drafts(sampled, result.finished_req_ids))

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
    def has_pending(self) -> bool:
        """Whether arrivals wait to be added before the next ``schedule()``."""
        return bool(self._pending)

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

    def note_first_token(self, rid: str, now: float) -> None:
        """``rid``'s first token comes at ``now`` (s) unless an earlier one did."""
        m = self._meta[rid]
        if m.first_token_s < 0:
            m.first_token_s = now

    def oldest_in_flight(self) -> tuple[float, float, int, int]:
        """The async loop's oldest batch in flight: start s, duration s, prefill and
        decode tokens."""
        return self._in_flight[0]

    def relaunch_in_flight(self, start: float, duration: float, prefill: int, decode: int) -> None:
        """The async loop after a stretch: the one batch in flight is the stretch's
        last scheduled, starting at ``start`` (s) for ``duration`` (s)."""
        self._in_flight[0] = (start, duration, prefill, decode)
        self._gpu_free = start + duration

    def finish_request(self, req: Request, now: float) -> None:
        """Record ``req``, finished at ``now`` (s), and tell the workload."""
        rid = req.request_id
        m = self._meta.pop(rid)
        self.requests.add(
            rid,
            self.replica_id,
            m.arrival_s,
            m.first_token_s,
            now,
            m.prompt_tokens,
            req.num_output_tokens,
            max(req.num_cached_tokens, 0),
            req.num_preemptions,
        )
        if self.on_progress is not None:
            self.on_progress(1)
        self.on_finish(rid, req.output_token_ids, now)
