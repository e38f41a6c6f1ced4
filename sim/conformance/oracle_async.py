"""The oracle's ``steps`` mode with ``async_scheduling``: vLLM's ``AsyncScheduler``
behind vLLM's own ``EngineCore.step_with_batch_queue``, run on an engine shell that
holds only the scheduler, a fake executor and the batch queue (the line schema is in
``vllm_driver.py``'s docstring).

The fake executors and the engine shell are also those of ``pd_driver.py`` and
``offload_driver.py`` (:class:`HeldOutputExecutor`, :class:`EngineShell`). Part of the
oracle driver; standard library and vLLM only.
"""

from __future__ import annotations

import queue
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from oracle_load import load_by_path
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine.core import EngineCoreProc
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput

oracle_common = load_by_path("oracle_common.py")
oracle_scheduler = load_by_path("oracle_scheduler.py")
StepReplay = load_by_path("oracle_steps.py").StepReplay


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class HeldOutputExecutor:
    """A fake model executor's hand-over of a batch's output: held from
    ``execute_model`` until ``sample_tokens`` (a batch without tokens returns its
    output at once, as vLLM's executor does)."""

    pending: ModelRunnerOutput | None = None

    def _hold(self, scheduler_output: Any, output: Any, empty: Any) -> Future:
        """``execute_model``'s future: ``empty`` for a batch without tokens, else None
        (``output`` waits for :meth:`sample_tokens`)."""
        if scheduler_output.total_num_scheduled_tokens == 0:
            return _done(empty)
        self.pending = output
        return _done(None)

    def sample_tokens(self, grammar_output: Any, non_block: bool = False) -> Future:
        """The output of the batch executed last."""
        output, self.pending = self.pending, None
        assert output is not None, "sample_tokens without execute_model"
        return _done(output)


class FakeExecutor(HeldOutputExecutor):
    """Stands in for the model executor: every batch executes at once.

    ``execute_model`` runs right after ``schedule()``; it decides which requests
    sample (those not in a partial prefill chunk) and records the batch;
    ``sample_tokens`` returns that batch's output."""

    def __init__(self, sched: Scheduler, token: int, free_blocks: Callable[[], int]) -> None:
        self.sched = sched
        self.token = token
        self.free_blocks = free_blocks
        self.executed: list[tuple[Any, ModelRunnerOutput, int]] = []

    def execute_model(self, scheduler_output: Any, non_block: bool = False) -> Future:
        """Fix the batch's sampled tokens; no output yet when any token was scheduled."""
        req_ids = list(scheduler_output.num_scheduled_tokens)
        sampled = oracle_scheduler.sampled_tokens(self.sched, scheduler_output, self.token)
        output = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=sampled,
        )
        self.executed.append((scheduler_output, output, self.free_blocks()))
        return self._hold(scheduler_output, output, EMPTY_MODEL_RUNNER_OUTPUT)


class EngineShell(EngineCoreProc):
    """An engine-core process holding only what ``step_with_batch_queue`` and
    ``has_work`` read: the scheduler, a fake executor and the batch queue (no model,
    no processes, no I/O)."""

    def __init__(self, sched: Scheduler, executor: FakeExecutor) -> None:  # noqa: D107
        # EngineCoreProc.__init__ is not called: it would load a model and open sockets.
        self.vllm_config = sched.vllm_config
        self.scheduler = sched
        self.model_executor = executor
        self.log_stats = True
        self.batch_queue_size = sched.vllm_config.max_concurrent_batches
        assert self.batch_queue_size > 1, "no batch queue without async scheduling"
        self.batch_queue = deque(maxlen=self.batch_queue_size)
        self.is_mm_encoder_only = False
        self.is_pooling_model = False
        self.check_for_draft_tokens = False
        self.async_scheduling = True
        self.aborts_queue = queue.Queue()
        self.engines_running = False
        self._weight_version = None


class AsyncStepReplay(StepReplay):
    """Replays one trace through vLLM's AsyncScheduler and engine-core batch queue."""

    def build(self) -> dict[str, Any]:
        """Build the scheduler and the engine shell; return the header line."""
        header = super().build()
        pool = self.sched.kv_cache_manager.block_pool
        self.executor = FakeExecutor(
            self.sched, int(self.cfg["sample_token_id"]), pool.get_num_free_blocks
        )
        self.engine = EngineShell(self.sched, self.executor)
        self.batch_steps: dict[int, int] = {}  # id(scheduler output) -> engine step
        header["config"]["async_scheduling"] = True
        header["config"]["batch_queue_size"] = self.engine.batch_queue_size
        return header

    def has_work(self) -> bool:
        """vLLM's own EngineCore.has_work."""
        return self.engine.has_work()

    def abort(self, rid: str) -> bool:
        """vLLM's own EngineCore.abort_requests for one request; whether it ended it."""
        req = self.sched.requests.get(rid)
        live = req is not None and not req.is_finished()
        self.engine.abort_requests([rid])
        return live and rid not in self.sched.requests

    def step(self, index: int) -> dict[str, Any]:
        """One call of vLLM's EngineCore.step_with_batch_queue."""
        sched = self.sched
        pool = sched.kv_cache_manager.block_pool
        free_before = pool.get_num_free_blocks()
        engine_outputs = self.engine_step()
        out, entries, free_after_schedule = self.scheduled_batch(index, free_before)
        preempted = sorted(out.preempted_req_ids or ()) if out is not None else []
        applied, sched.applied = sched.applied, []
        assert len(applied) <= 1, "more than one batch applied in one iteration"
        applied_step = self.batch_steps.pop(id(applied[0])) if applied else None
        outputs = engine_outputs or {}
        num_running, num_waiting = sched.get_request_counts()
        line: dict[str, Any] = {
            "type": "step",
            "step": index,
            "scheduled": entries,
            "total_scheduled_tokens": out.total_num_scheduled_tokens if out is not None else 0,
            "preempted": preempted,
            "applied_step": applied_step,
            "new_tokens": [
                o.request_id for eco in outputs.values() for o in eco.outputs if o.new_token_ids
            ],
            "finished": oracle_scheduler.finished_ids(outputs),
            "in_flight": [self.batch_steps[id(b[1])] for b in reversed(self.engine.batch_queue)],
            "free_blocks_after_schedule": free_after_schedule,
            "free_blocks": pool.get_num_free_blocks(),
            "num_running": num_running,
            "num_waiting": num_waiting,
            "kv_cache_usage": oracle_common.rounded(sched.get_kv_cache_usage()),
            "prefix_cache": oracle_scheduler.prefix_stats_json(outputs) if applied else None,
        }
        if self.cfg["enable_kv_cache_events"]:
            line["kv_events"] = [oracle_common.event_to_json(e) for e in self.sink.take()]
        if self.cfg["num_speculative_tokens"]:
            line["skip_drafts"] = bool(out.skip_drafts) if out is not None else None
            line["spec_decoding"] = oracle_scheduler.spec_stats_json(outputs) if applied else None
        return line

    def engine_step(self) -> dict[int, Any] | None:
        """Queue this step's in-step aborts and call ``step_with_batch_queue`` once;
        note the aborts it made, or leave them to the next step when it applied no
        output. Returns its engine-core outputs."""
        sched = self.sched
        live = {rid for rid in self.in_step if rid in sched.requests}
        for rid in self.in_step:  # one abort message per client, as the input thread queues
            self.engine.aborts_queue.put_nowait([rid])
        engine_outputs, _ = self.engine.step_with_batch_queue()
        if self.engine.aborts_queue.empty():  # read before an output was applied
            self.aborted += [
                rid for rid in self.in_step if rid in live and rid not in sched.requests
            ]
        else:  # no output applied: the input queue's copy aborts at the next step
            while not self.engine.aborts_queue.empty():
                self.engine.aborts_queue.get_nowait()
            self.deferred = list(self.in_step)
        return engine_outputs

    def scheduled_batch(
        self, index: int, free_before: int
    ) -> tuple[Any, list[dict[str, Any]], int]:
        """The batch this step scheduled (None: none), its requests' entries and the
        free blocks right after its ``schedule()`` (``free_before`` when none)."""
        new_batches, self.executor.executed = self.executor.executed, []
        assert len(new_batches) <= 1, "more than one batch scheduled in one iteration"
        if not new_batches:
            return None, [], free_before
        out, mro, free_after_schedule = new_batches[0]
        self.batch_steps[id(out)] = index
        blocks = oracle_scheduler.new_blocks_by_request(out)
        entries = [
            self.scheduled_entry(rid, n, blocks.get(rid, []))
            for rid, n in out.num_scheduled_tokens.items()
        ]
        sampled_flags = [bool(t) for t in mro.sampled_token_ids]
        self.add_spec_counts(entries, out)
        self.resuming.update(out.preempted_req_ids or ())
        for entry, sampled in zip(entries, sampled_flags):
            self.finish_entry(entry, sampled)
            req = self.sched.requests.get(entry["id"])
            if req is not None:
                entry["placeholders"] = req.num_output_placeholders
        return out, entries, free_after_schedule
