"""Oracle driver for the CPU KV offload tier: vLLM 0.33.0's real ``Scheduler`` with its
``OffloadingConnector`` (scheduler role), run on a CPU.

Executed by the oracle environment's interpreter (``.venv-vllm/bin/python``); kvsim
never imports it. Uses the standard library, vLLM, and sibling files loaded by path
(``oracle_load.py``): the oracle driver's ``oracle_config.py`` (model directory,
NONE_HASH), ``oracle_common.py`` (request set-up), ``oracle_scheduler.py`` (the
recording async scheduler, sampled tokens, a step's counters) and ``oracle_async.py``
(the held-output executor, the engine shell), ``oracle_offload.py`` (the engine of a
case, what the lines read off vLLM's objects, vLLM's chunk count), and kvsim's
standard-library files: ``offload_worker.py`` (the fake worker both replays share),
``offload_case.py`` (a case's knobs and their defaults), ``offload_lines.py`` (the
line fields), ``trace_feed.py`` (a trace's arrivals and aborts) and ``step_loop.py``
(the step loop).

The engine is configured as ``--kv-offloading-size`` does it: ``CacheConfig.
kv_offloading_size`` (GiB) makes ``VllmConfig`` pick the ``OffloadingConnector``
with ``kv_role="kv_both"`` and ``cpu_bytes_to_use``; ``blocks_per_chunk`` and
``offload_prompt_only`` go in ``kv_connector_extra_config``. The KV specs are tiny
(one head of size 1), so one CPU chunk is one 4 KiB page and ``cpu_chunks`` pages
make a tier of ``cpu_chunks`` chunks. The worker side is ``FakeOffloadWorker``: its
reports reach ``update_from_output`` as the ``KVConnectorOutput`` of the model
output (``finished_recving`` and ``OffloadingWorkerMetadata.completed_jobs``).

Usage: ``offload_driver.py JOBS`` where JOBS is a JSON file holding
``[{"mode": "steps", "config", "trace", "out"} | {"mode": "capacity", "cases", "out"}]``;
each job writes JSON lines to its ``out``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import vllm
from oracle_load import load_by_path
from vllm.v1.core import kv_cache_utils
from vllm.v1.request import RequestStatus

oracle_config = load_by_path("oracle_config.py")
oracle_common = load_by_path("oracle_common.py")
oracle_scheduler = load_by_path("oracle_scheduler.py")
oracle_async = load_by_path("oracle_async.py")
oracle_offload = load_by_path("oracle_offload.py")
offload_lines = load_by_path("offload_lines.py")
FakeOffloadWorker = load_by_path("offload_worker.py").FakeOffloadWorker
OFFLOAD_DEFAULTS = load_by_path("offload_case.py").DEFAULTS
TraceFeed = load_by_path("trace_feed.py").TraceFeed
summary_line = load_by_path("trace_feed.py").summary_line
replay_steps = load_by_path("step_loop.py").replay_steps


class SortedIterSet(set):
    """A set iterated in sorted order. vLLM's ``finished_req_ids`` is a set of str, so
    the order in which the connector visits finished requests (their stores, their
    LRU recency) follows string hashing, which differs from process to process; the
    driver fixes it to sorted order, which kvcore's connector uses."""

    def __iter__(self):  # type: ignore[override]
        return iter(sorted(set.__iter__(self)))


class OffloadReplay:
    """vLLM's replay of one case, one line per ``schedule()`` and
    ``update_from_output`` (:meth:`run`)."""

    def __init__(self, cfg_in: dict[str, Any], trace: list[dict[str, Any]]) -> None:
        cfg = oracle_config.merged(OFFLOAD_DEFAULTS, cfg_in)
        self.trace = trace
        self.max_model_len = oracle_config.resolve_max_model_len(cfg, trace)
        hash_fn, _ = oracle_config.init_none_hash(
            cfg["prefix_caching_hash_algo"], cfg["none_hash_seed"]
        )
        self.hasher = kv_cache_utils.get_request_block_hasher(int(cfg["block_size"]), hash_fn)
        self.sched = oracle_offload.build(cfg, self.max_model_len)
        self.conn = self.sched.connector.scheduler
        self.manager = self.conn.manager
        self.worker = FakeOffloadWorker(int(cfg["load_latency"]), int(cfg["store_latency"]))
        self.pool = self.sched.kv_cache_manager.block_pool
        self.token = int(cfg["sample_token_id"])

    def has_work(self) -> bool:
        """Whether the scheduler still holds requests."""
        return self.sched.has_requests()

    def run(self) -> list[dict[str, Any]]:
        """The case's lines: header, steps, summary."""
        self.sched.finished_req_ids = SortedIterSet()
        header = offload_lines.header_line(
            vllm.__version__, self.manager._num_chunks, self.max_model_len
        )
        lines, steps = replay_steps(
            self._feed(), self.has_work, self.step_line, offload_lines.MAX_STEPS
        )
        return [header, *lines, summary_line(steps, self.pool.get_num_free_blocks())]

    def _feed(self) -> Any:
        """The trace's arrivals and aborts for vLLM's scheduler."""
        sched = self.sched

        def add(spec: dict[str, Any], arrival: float) -> None:
            sched.add_request(
                oracle_common.make_request(spec, arrival, self.hasher, int(spec["max_tokens"]))
            )

        def abort(rid: str) -> list[str]:
            ended = sched.finish_requests([rid], RequestStatus.FINISHED_ABORTED)
            return [r.request_id for r in ended]

        return TraceFeed(self.trace, add, abort)

    def state(self) -> dict[str, Any]:
        """The scheduler's state at the end of a step (``offload_lines.state_fields``)."""
        sched = self.sched
        num_running, num_waiting = sched.get_request_counts()
        return offload_lines.state_fields(
            self.pool.get_num_free_blocks(),
            num_running,
            num_waiting,
            offload_lines.waiting_for_kv(
                sched.requests.values(), RequestStatus.WAITING_FOR_REMOTE_KVS
            ),
            oracle_offload.cpu_state(self.manager),
        )

    def batch(self, step: int, out: Any) -> tuple[dict[str, Any], Any]:
        """Right after ``schedule()``: the batch's fields, with its jobs handed to the
        fake worker in step ``step``, and the worker's report."""
        free_after = self.pool.get_num_free_blocks()
        meta = out.kv_connector_metadata
        loads, stores = oracle_offload.jobs_json(self.conn, meta)
        report = offload_lines.worker_round(self.worker, step, meta)
        return offload_lines.batch_fields(out, free_after, loads, stores, report), report

    def step_line(self, step: int, aborted: list[str]) -> dict[str, Any]:
        """Schedule, run the fake worker and model (a request samples once its tokens
        are all computed), apply the output; the step's line."""
        sched = self.sched
        out = sched.schedule()
        sched.finished_req_ids = SortedIterSet()
        batch, report = self.batch(step, out)
        req_ids = list(out.num_scheduled_tokens)
        sampled = []
        for rid in req_ids:
            req = sched.requests[rid]
            sampled.append([self.token] if req.num_computed_tokens >= req.num_tokens else [])
        mro = oracle_offload.model_output(req_ids, sampled, report)
        applied = oracle_offload.applied_json(sched.update_from_output(out, mro))
        return offload_lines.sync_line(step, aborted, batch, applied, self.state())


class OffloadExecutor(oracle_async.HeldOutputExecutor):
    """The fake model executor of the async replay: at ``execute_model`` (right after
    ``schedule()``) it hands the batch's metadata to the fake worker and fixes the
    batch's output (sampled tokens and the worker's report); ``sample_tokens``
    returns it."""

    def __init__(self, replay: OffloadReplay) -> None:
        self.replay = replay
        self.step_index = 0
        self.executed: list[tuple[Any, dict[str, Any]]] = []

    def execute_model(self, scheduler_output: Any, non_block: bool = False) -> Any:
        """Record the batch's fields and hold its output."""
        out, r = scheduler_output, self.replay
        fields, report = r.batch(self.step_index, out)
        sampled = oracle_scheduler.sampled_tokens(r.sched, out, r.token)
        output = oracle_offload.model_output(list(out.num_scheduled_tokens), sampled, report)
        self.executed.append((out, fields))
        return self._hold(out, output, output)


class AsyncOffloadReplay(OffloadReplay):
    """:class:`OffloadReplay` with vLLM's async engine loop (``AsyncScheduler`` behind
    the engine core's ``step_with_batch_queue``): one line per engine iteration."""

    def __init__(self, cfg_in: dict[str, Any], trace: list[dict[str, Any]]) -> None:
        super().__init__(cfg_in, trace)
        self.executor = OffloadExecutor(self)
        self.engine = oracle_async.EngineShell(self.sched, self.executor)
        self.batch_steps: dict[int, int] = {}  # id(scheduler output) -> engine iteration

    def has_work(self) -> bool:
        """Whether the engine still has requests or batches in flight."""
        return self.engine.has_work()

    def step_line(self, step: int, aborted: list[str]) -> dict[str, Any]:
        """One engine iteration (schedule a batch and/or apply the oldest output); its
        line."""
        sched = self.sched
        self.executor.step_index = step
        engine_outputs, _ = self.engine.step_with_batch_queue()
        sched.finished_req_ids = SortedIterSet(sched.finished_req_ids)
        executed, self.executor.executed = self.executor.executed, []
        batch = None
        if executed:
            out, batch = executed[0]
            self.batch_steps[id(out)] = step
        applied, sched.applied = sched.applied, []
        applied_step = self.batch_steps.pop(id(applied[0])) if applied else None
        fields = (
            oracle_offload.applied_json(engine_outputs)
            if applied
            else offload_lines.nothing_applied()
        )
        state = self.state()
        in_flight = [self.batch_steps[id(b[1])] for b in reversed(self.engine.batch_queue)]
        return offload_lines.async_line(
            step, aborted, batch, applied_step, fields, state, in_flight
        )


def run_steps(cfg_in: dict[str, Any], trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM's lines for a case (:class:`OffloadReplay`)."""
    return OffloadReplay(cfg_in, trace).run()


def run_steps_async(cfg_in: dict[str, Any], trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM's lines for a case with async scheduling (:class:`AsyncOffloadReplay`)."""
    return AsyncOffloadReplay(cfg_in, trace).run()


def main(argv: list[str]) -> int:
    """Run the jobs of the JSON file ``argv[1]``; each writes its lines to its ``out``."""
    with open(argv[1]) as f:
        jobs = json.load(f)
    for job in jobs:
        if job["mode"] == "capacity":
            lines = oracle_offload.run_capacity(job["cases"])
        else:
            try:
                replay = run_steps_async if job["config"].get("async_scheduling") else run_steps
                lines = replay(job["config"], job["trace"])
            except Exception as e:  # noqa: BLE001 - reported as a mismatch
                lines = [{"type": "error", "error": f"{type(e).__name__}: {e}"}]
        with open(job["out"], "w") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
