"""Oracle driver for P/D disaggregation: vLLM 0.33.0's real ``Scheduler`` (or
``AsyncScheduler`` behind its engine-core batch queue) with the NIXL connector in the
scheduler role, run on a CPU, on a prefill or a decode instance.

Executed by the oracle environment's interpreter (``.venv-vllm/bin/python``); kvsim
never imports it. Uses the standard library, vLLM, and sibling files loaded by path
(``oracle_load.py``): the oracle driver's ``oracle_config.py`` (model directory,
VllmConfig, NONE_HASH), ``oracle_scheduler.py`` (the recording async scheduler, the
prefix-cache counters) and ``oracle_async.py`` (the held-output executor, the engine
shell), ``oracle_pd.py`` (the engine of a case, its requests, the fake model's
output), and kvsim's standard-library files: ``pd_worker.py`` (the fake worker both
replays share), ``pd_case.py`` (a case's knobs), ``trace_feed.py`` (a trace's
arrivals and aborts) and ``step_loop.py`` (the step loop).

The connector is built as ``--kv-transfer-config`` does it:
``KVTransferConfig(kv_connector="NixlConnector" | "NixlPushConnector",
kv_role="kv_producer" | "kv_consumer" | "kv_both", kv_load_failure_policy=...)``. vLLM's NIXL
scheduler side imports and runs without the ``nixl`` library (only its worker side
needs it; vLLM logs "NIXL is not available"), so nothing is stubbed. Requests carry
their ``kv_transfer_params`` in ``SamplingParams.extra_args`` (a fresh copy per
replay: the connector writes into it). The worker side is ``FakeNixlWorker``, called
when a batch executes; its report reaches ``update_from_output`` as the batch's
``KVConnectorOutput`` (an empty batch too, as vLLM's ``kv_connector_no_forward``).

Usage: ``pd_driver.py JOBS`` where JOBS is a JSON file holding
``[{"config", "trace", "out"}]``; each job writes JSON lines to its ``out``.
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
oracle_scheduler = load_by_path("oracle_scheduler.py")
oracle_async = load_by_path("oracle_async.py")
oracle_pd = load_by_path("oracle_pd.py")
FakeNixlWorker = load_by_path("pd_worker.py").FakeNixlWorker
pd_case = load_by_path("pd_case.py")
TraceFeed = load_by_path("trace_feed.py").TraceFeed
summary_line = load_by_path("trace_feed.py").summary_line
replay_steps = load_by_path("step_loop.py").replay_steps

MAX_STEPS = 5000
"""Steps after which the replay gives up on a case (it never ends)."""


class SortedIterSet(set):
    """A set iterated in sorted order (vLLM's ``finished_req_ids`` follows string
    hashing otherwise; kvcore visits finished requests sorted)."""

    def __iter__(self):  # type: ignore[override]
        return iter(sorted(set.__iter__(self)))


def meta_json(meta: Any) -> dict[str, Any]:
    """The batch's NIXL metadata in the neutral form of the step lines and the worker."""
    recv = []
    for rid, m in sorted(meta.reqs_to_recv.items()):
        blocks = [int(b) for b in m.local_block_ids[0]] if len(m.local_block_ids) else []
        computed = [int(n) for n in m.local_num_computed_blocks]
        recv.append([rid, blocks, computed, bool(m.awaiting_kvs)])
    return {
        "recv": recv,
        "send": sorted(meta.reqs_to_send),
        "in_batch": sorted(meta.reqs_in_batch),
        "not_processed": sorted(meta.reqs_not_processed),
        "push_reg": sorted(
            [rid, [int(b) for b in r["local_block_ids"][0]]]
            for rid, r in meta.push_registrations.items()
        ),
        "push_fin": sorted(
            [rid, [int(b) for b in g[0]] if len(g) else []]
            for rid, g in meta.push_finished_blocks.items()
        ),
    }


def cache_json(engine_outputs: dict[int, Any] | None) -> dict[str, Any] | None:
    """The step's prefix-cache counters (GPU, and connector hits) from the scheduler
    stats of the outputs (None: no output applied in this step)."""
    if engine_outputs is None:
        return None
    stats = None
    for eco in engine_outputs.values():
        if eco.scheduler_stats is not None:
            stats = eco.scheduler_stats
    cps = stats.connector_prefix_cache_stats if stats is not None else None
    return {
        "gpu": oracle_scheduler.prefix_stats_json(engine_outputs),
        "connector": [0, 0, 0]
        if cps is None
        else [int(cps.requests), int(cps.queries), int(cps.hits)],
    }


def outputs_json(engine_outputs: dict[int, Any] | None) -> tuple[list[str], dict[str, Any]]:
    """Finished request ids (sorted) and their compared transfer parameters."""
    finished, params = [], {}
    for eco in (engine_outputs or {}).values():
        for o in eco.outputs:
            if o.finish_reason is None:
                continue
            finished.append(o.request_id)
            if o.kv_transfer_params is not None:
                params[o.request_id] = pd_case.params_json(o.kv_transfer_params)
    return sorted(finished), params


class PDExecutor(oracle_async.HeldOutputExecutor):
    """The fake model executor of the async replay: at ``execute_model`` (right after
    ``schedule()``) it fixes the batch's sampled tokens and asks the fake worker for
    the batch's report; ``sample_tokens`` returns that output."""

    def __init__(self, replay: PDReplay) -> None:
        self.replay = replay
        self.executed: list[tuple[Any, dict[str, Any], dict[str, Any], int]] = []

    def execute_model(self, scheduler_output: Any, non_block: bool = False) -> Any:
        """Record the batch (its metadata, the worker's report) and hold its output."""
        r = self.replay
        free_after = r.pool.get_num_free_blocks()
        meta = meta_json(scheduler_output.kv_connector_metadata)
        report = r.worker.step(r.step_index, meta)
        req_ids = list(scheduler_output.num_scheduled_tokens)
        output = oracle_pd.model_output(
            req_ids, oracle_pd.sampled_for(r.sched, scheduler_output, r.token), report
        )
        self.executed.append((scheduler_output, meta, report, free_after))
        return self._hold(scheduler_output, output, output)


class PDReplay:
    """Replays one P/D case and returns its JSON lines."""

    def __init__(self, cfg_in: dict[str, Any], trace: list[dict[str, Any]]) -> None:
        self.cfg = cfg = oracle_config.merged(pd_case.DEFAULTS, cfg_in)
        self.trace = trace
        self.max_model_len = oracle_config.resolve_max_model_len(cfg, trace)
        hash_fn, _ = oracle_config.init_none_hash(
            cfg["prefix_caching_hash_algo"], cfg["none_hash_seed"]
        )
        self.hasher = kv_cache_utils.get_request_block_hasher(int(cfg["block_size"]), hash_fn)
        self.sched = oracle_pd.build(cfg, self.max_model_len)
        self.sched.finished_req_ids = SortedIterSet()
        self.pool = self.sched.kv_cache_manager.block_pool
        self.worker = FakeNixlWorker(trace, int(cfg["lease_steps"]))
        self.token = int(cfg["sample_token_id"])
        self.step_index = 0
        self.async_mode = bool(cfg["async_scheduling"])
        if self.async_mode:
            self.executor = PDExecutor(self)
            self.engine = oracle_async.EngineShell(self.sched, self.executor)
            self.batch_steps: dict[int, int] = {}

    def has_work(self) -> bool:
        """Whether the engine (async) or the scheduler still has work."""
        return self.engine.has_work() if self.async_mode else self.sched.has_requests()

    def abort(self, rid: str) -> list[str]:
        """Abort request ``rid``; the ids of the live requests it finished."""
        if self.async_mode:
            req = self.sched.requests.get(rid)
            live = req is not None and not req.is_finished()
            self.engine.abort_requests([rid])
            return [rid] if live else []
        ended = self.sched.finish_requests([rid], RequestStatus.FINISHED_ABORTED)
        return [r.request_id for r in ended]

    def common(self, line: dict[str, Any]) -> dict[str, Any]:
        """``line`` with the state at the end of the step (free blocks, counts, the
        requests waiting for KV, the finished requests still held)."""
        sched = self.sched
        num_running, num_waiting = sched.get_request_counts()
        line.update(
            free_blocks=self.pool.get_num_free_blocks(),
            num_running=num_running,
            num_waiting=num_waiting,
            waiting_for_kv=sorted(
                r.request_id
                for r in sched.requests.values()
                if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS
            ),
            held=sorted(r.request_id for r in sched.requests.values() if r.is_finished()),
        )
        return line

    def sync_step(self) -> dict[str, Any]:
        """Schedule, run the fake worker and model, apply the output; the step's fields."""
        sched = self.sched
        out = sched.schedule()
        sched.finished_req_ids = SortedIterSet()
        free_after = self.pool.get_num_free_blocks()
        meta = meta_json(out.kv_connector_metadata)
        report = self.worker.step(self.step_index, meta)
        req_ids = list(out.num_scheduled_tokens)
        mro = oracle_pd.model_output(req_ids, oracle_pd.sampled_for(sched, out, self.token), report)
        engine_outputs = sched.update_from_output(out, mro)
        finished, params = outputs_json(engine_outputs)
        return {
            "scheduled": [{"id": rid, "n": n} for rid, n in out.num_scheduled_tokens.items()],
            "preempted": sorted(out.preempted_req_ids or ()),
            "meta": meta,
            "report": report,
            "free_blocks_after_schedule": free_after,
            "finished": finished,
            "params": params,
            "cache": cache_json(engine_outputs),
        }

    def async_step(self) -> dict[str, Any]:
        """One engine iteration (schedule a batch and/or apply the oldest output); its
        fields."""
        engine_outputs, _ = self.engine.step_with_batch_queue()
        executed, self.executor.executed = self.executor.executed, []
        line: dict[str, Any] = {"scheduled": None}
        if executed:
            out, meta, report, free_after = executed[0]
            self.batch_steps[id(out)] = self.step_index
            line.update(
                scheduled=[{"id": rid, "n": n} for rid, n in out.num_scheduled_tokens.items()],
                preempted=sorted(out.preempted_req_ids or ()),
                meta=meta,
                report=report,
                free_blocks_after_schedule=free_after,
            )
        self.sched.finished_req_ids = SortedIterSet(self.sched.finished_req_ids)
        applied, self.sched.applied = self.sched.applied, []
        line["applied_step"] = self.batch_steps.pop(id(applied[0])) if applied else None
        line["finished"], line["params"] = outputs_json(engine_outputs)
        line["cache"] = cache_json(engine_outputs) if applied else None
        line["in_flight"] = [self.batch_steps[id(b[1])] for b in reversed(self.engine.batch_queue)]
        return line

    def run(self) -> list[dict[str, Any]]:
        lines: list[dict[str, Any]] = [
            {
                "type": "header",
                "vllm_version": vllm.__version__,
                "max_model_len": self.max_model_len,
            }
        ]
        feed = TraceFeed(
            self.trace,
            lambda spec, t: self.sched.add_request(oracle_pd.make_request(spec, t, self.hasher)),
            self.abort,
        )
        while True:
            step = self.step_index
            aborted = feed.at_step(step)
            if feed.drained and not self.has_work():
                break
            if step > 5000:
                raise RuntimeError("no end after 5000 steps")
            body = self.async_step() if self.async_mode else self.sync_step()
            line = {"type": "step", "step": step, "aborted": aborted, **body}
            lines.append(self.common(line))
            self.step_index += 1
        lines.append(summary_line(self.step_index, self.pool.get_num_free_blocks()))
        return lines


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        jobs = json.load(f)
    for job in jobs:
        try:
            lines = PDReplay(job["config"], job["trace"]).run()
        except Exception as e:  # noqa: BLE001 - reported as a mismatch
            lines = [{"type": "error", "error": f"{type(e).__name__}: {e}"}]
        with open(job["out"], "w") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
