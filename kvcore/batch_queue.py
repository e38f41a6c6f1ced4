"""The engine core's batch queue: the loop that drives an :class:`AsyncScheduler`.

Mirrors ``EngineCore.step_with_batch_queue`` of ``vllm/v1/engine/core.py`` (vLLM
0.33.0) without a clock: "executing" a batch means asking a model function, at
schedule time, which tokens the batch samples; its output is applied when the batch
leaves the queue. One :meth:`BatchQueue.step` is one engine iteration. A caller with
a clock (the simulator's engine loop) uses the two halves instead:
:meth:`BatchQueue.schedule_next` (plan and enqueue a batch; says whether the engine
must now wait for the oldest batch) and :meth:`BatchQueue.apply_oldest` (after that
batch finished executing: apply its output).

With ``batch_queue_size`` 1 the loop is the synchronous ``EngineCore.step``
(schedule, execute, apply, every iteration).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kvcore.async_scheduler import BATCH_QUEUE_SIZE
from kvcore.kv_connector_output import KVConnectorOutput
from kvcore.sched_output import EngineStepOutput, SchedulerOutput
from kvcore.scheduler import Scheduler

SampleFn = Callable[[Scheduler, SchedulerOutput], Mapping[str, Sequence[int]]]
"""The model: called right after ``schedule()``, returns the tokens the batch samples
per request id (requests left out sample nothing)."""

KVWorkerFn = Callable[[Scheduler, SchedulerOutput], KVConnectorOutput]
"""A KV connector's worker side: called right after ``schedule()`` (after the model
function), returns what the workers report in that batch's output."""


def sample_fixed_token(token_id: int) -> SampleFn:
    """The fake model of kvsim's replays: ``token_id`` for every scheduled request whose
    prefill completes in the batch (``not is_prefill_chunk``), nothing for a partial
    prefill chunk."""

    def sample(scheduler: Scheduler, out: SchedulerOutput) -> dict[str, list[int]]:
        requests = scheduler.requests
        return {
            rid: [token_id]
            for rid in out.num_scheduled_tokens
            if not requests[rid].is_prefill_chunk
        }

    return sample


@dataclass(slots=True, init=False)
class Batch:
    """One scheduled batch: the engine step that planned it and what it samples (its
    ``__init__`` written out, as :class:`kvcore.sched_output.SchedulerOutput`'s: one is
    made per engine step)."""

    step: int
    """Index of the engine iteration (:attr:`BatchQueue.iteration`) that scheduled it."""
    scheduler_output: SchedulerOutput
    sampled_token_ids: Mapping[str, Sequence[int]]
    kv_connector_output: KVConnectorOutput | None
    """The connector workers' report for the batch (None without a connector)."""

    def __init__(
        self,
        step: int,
        scheduler_output: SchedulerOutput,
        sampled_token_ids: Mapping[str, Sequence[int]],
        kv_connector_output: KVConnectorOutput | None = None,
    ) -> None:
        self.step = step
        self.scheduler_output = scheduler_output
        self.sampled_token_ids = sampled_token_ids
        self.kv_connector_output = kv_connector_output


@dataclass(slots=True)
class IterationResult:
    """What one engine iteration did (:meth:`BatchQueue.step`)."""

    step: int
    scheduled: Batch | None
    """The batch scheduled in this iteration (None: the scheduler had no requests)."""
    applied: Batch | None
    """The batch whose output was applied in this iteration (None: none was)."""
    output: EngineStepOutput | None
    """``update_from_output``'s result for ``applied``."""


class BatchQueue:
    """Mirrors vLLM 0.33.0's ``EngineCore.step_with_batch_queue`` loop.

    ``batch_queue_size``: vLLM's ``VllmConfig.max_concurrent_batches`` (2 for async
    scheduling without pipeline parallelism; :data:`BATCH_QUEUE_SIZE`). Batches leave
    the queue oldest first.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        sample: SampleFn,
        batch_queue_size: int = BATCH_QUEUE_SIZE,
        kv_worker: KVWorkerFn | None = None,
    ) -> None:
        """``kv_worker``: the worker side of the scheduler's KV connector, if any (a
        batch without tokens is executed too: vLLM's ``kv_connector_no_forward``)."""
        if batch_queue_size < 1:
            raise ValueError(f"batch_queue_size must be >= 1, got {batch_queue_size}")
        self.scheduler = scheduler
        self.sample = sample
        self.kv_worker = kv_worker
        self.batch_queue_size = batch_queue_size
        self.queue: deque[Batch] = deque()
        """Batches in flight, newest first (vLLM's ``appendleft`` / ``pop``)."""
        self.iteration = 0
        """Index of the next engine iteration."""

    def has_work(self) -> bool:
        """Whether the engine should iterate (vLLM's ``EngineCore.has_work``)."""
        return self.scheduler.has_requests() or bool(self.queue)

    def in_flight_steps(self) -> list[int]:
        """Engine steps of the batches in flight, oldest first."""
        return [b.step for b in reversed(self.queue)]

    def schedule_next(self) -> tuple[Batch | None, bool]:
        """The first half of an iteration: ``(batch scheduled or None, must_wait)``.

        Schedules a batch when the scheduler has requests and enqueues it. ``must_wait``
        is false when the iteration ends here: the queue has room and the batch
        scheduled tokens or more requests wait, or nothing is queued at all (idle).
        Otherwise the engine must wait for the oldest batch and call
        :meth:`apply_oldest`, which ends the iteration.
        """
        assert len(self.queue) < self.batch_queue_size, "the batch queue is full"
        step = self.iteration
        self.iteration += 1
        scheduler = self.scheduler
        if not scheduler.has_requests():
            return None, bool(self.queue)
        out = scheduler.schedule()
        batch = Batch(step, out, self.sample(scheduler, out))
        if self.kv_worker is not None:
            batch.kv_connector_output = self.kv_worker(scheduler, out)
        self.queue.appendleft(batch)
        executed = out.total_num_scheduled_tokens > 0
        if len(self.queue) < self.batch_queue_size and (executed or scheduler.has_requests()):
            return batch, False
        return batch, True

    def apply_oldest(self) -> tuple[Batch, EngineStepOutput]:
        """Pop the oldest batch and apply its output (``update_from_output``)."""
        batch = self.queue.pop()
        result = self.scheduler.update_from_output(
            batch.scheduler_output, batch.sampled_token_ids, batch.kv_connector_output
        )
        return batch, result

    def replace_in_flight(self, num_iterations: int, scheduler_output: SchedulerOutput) -> Batch:
        """Bookkeeping of a fast-forward (:mod:`kvcore.fast_forward_async`) that did
        ``num_iterations`` iterations at once: they applied the one batch in flight and
        every batch they scheduled but the last, whose ``scheduler_output`` is now the
        batch in flight (its tokens sampled as :meth:`schedule_next` samples them)."""
        assert len(self.queue) == 1 and num_iterations >= 1
        self.queue.pop()
        self.iteration += num_iterations
        out = scheduler_output
        batch = Batch(self.iteration - 1, out, self.sample(self.scheduler, out))
        self.queue.appendleft(batch)
        return batch

    def step(self) -> IterationResult:
        """One engine iteration: :meth:`schedule_next`, then :meth:`apply_oldest` when
        it says to wait."""
        step = self.iteration
        scheduled, must_wait = self.schedule_next()
        if not must_wait:
            return IterationResult(step, scheduled, None, None)
        applied, output = self.apply_oldest()
        return IterationResult(step, scheduled, applied, output)
