"""The oracle's synchronous ``steps`` mode: one trace through vLLM's ``Scheduler``, one
``schedule()`` / fake model / ``update_from_output()`` round per step (the set-up and
line schema are in ``vllm_driver.py``'s docstring). ``oracle_async.py`` derives the
async replay from :class:`StepReplay`.

Part of the oracle driver; standard library and vLLM only.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import vllm
from oracle_load import load_by_path
from vllm.v1.core import kv_cache_utils
from vllm.v1.request import RequestStatus

oracle_config = load_by_path("oracle_config.py")
oracle_common = load_by_path("oracle_common.py")
oracle_scheduler = load_by_path("oracle_scheduler.py")


class StepReplay:
    """Replays one trace through a Scheduler and yields the JSON lines."""

    def __init__(self, trace: list[dict[str, Any]], cfg: dict[str, Any], name: str) -> None:
        self.trace = trace
        self.cfg = cfg
        self.name = name
        self.seen: set[str] = set()
        self.resuming: set[str] = set()
        self.in_step: list[str] = []  # aborts that come while the next step runs
        self.aborted: list[str] = []  # ids the aborts of the current step ended
        self.deferred: list[str] = []  # in-step aborts left to the next step

    def build(self) -> dict[str, Any]:
        """Build the scheduler and return the header line."""
        t0 = time.perf_counter()
        cfg = self.cfg
        self.max_model_len = oracle_config.resolve_max_model_len(cfg, self.trace)
        hash_fn, none_hash = oracle_config.init_none_hash(
            cfg["prefix_caching_hash_algo"], cfg["none_hash_seed"]
        )
        self.sched, self.sink = oracle_scheduler.build_scheduler(cfg, self.max_model_len)
        self.block_hasher = kv_cache_utils.get_request_block_hasher(
            int(cfg["block_size"]),
            hash_fn,
            num_hash_lookahead_tokens=self.sched.vllm_config.num_hash_lookahead_tokens,
        )
        return {
            "type": "header",
            "vllm_version": vllm.__version__,
            "trace": self.name,
            "num_requests": len(self.trace),
            "sample_token_id": int(cfg["sample_token_id"]),
            "build_s": round(time.perf_counter() - t0, 3),
            "config": oracle_scheduler.header_config(self.sched, cfg, self.max_model_len),
            "none_hash_seed": cfg["none_hash_seed"],
            "none_hash": none_hash.hex(),
        }

    def has_work(self) -> bool:
        """Whether the loop goes on once every request has arrived."""
        return self.sched.has_requests()

    def abort(self, rid: str) -> bool:
        """Abort one request as the engine core does; whether it ended it."""
        req = self.sched.requests.get(rid)
        live = req is not None and not req.is_finished()
        self.sched.finish_requests([rid], RequestStatus.FINISHED_ABORTED)
        return live and rid not in self.sched.requests

    def scheduled_entry(self, rid: str, n: int, blocks: list[list[int]]) -> dict[str, Any]:
        """The per-request record of one step (before model output)."""
        if rid not in self.seen:
            kind = "new"
            self.seen.add(rid)
        elif rid in self.resuming:
            kind = "resumed"
            self.resuming.discard(rid)
        else:
            kind = "running"
        return {"id": rid, "kind": kind, "n": n, "new_block_ids": blocks}

    def finish_entry(self, entry: dict[str, Any], sampled: bool) -> None:
        """Add the post-output fields of a scheduled request (if it still exists)."""
        entry["sampled"] = sampled
        req = self.sched.requests.get(entry["id"])
        if req is None:
            return
        entry["computed_after"] = req.num_computed_tokens
        entry["num_tokens"] = req.num_tokens
        if self.cfg["dump_block_tables"]:
            ids = self.sched.kv_cache_manager.get_block_ids(entry["id"])
            entry["block_table"] = [list(g) for g in ids]

    def step(self, index: int) -> dict[str, Any]:
        """Run one schedule() / fake model / update_from_output() round."""
        sched = self.sched
        pool = sched.kv_cache_manager.block_pool
        out = sched.schedule()
        free_after_schedule = pool.get_num_free_blocks()
        blocks = oracle_scheduler.new_blocks_by_request(out)
        entries = [
            self.scheduled_entry(rid, n, blocks.get(rid, []))
            for rid, n in out.num_scheduled_tokens.items()
        ]
        token = int(self.cfg["sample_token_id"])
        mro = oracle_scheduler.fake_model_output(sched, out, token)
        self.aborted += [rid for rid in self.in_step if self.abort(rid)]
        engine_outputs = sched.update_from_output(out, mro)
        oracle_scheduler.propose_drafts(sched, out, token)
        self.add_spec_counts(entries, out)
        for entry, tokens in zip(entries, mro.sampled_token_ids):
            self.finish_entry(entry, bool(tokens))
        preempted = sorted(out.preempted_req_ids or ())
        self.resuming.update(preempted)
        num_running, num_waiting = sched.get_request_counts()
        line: dict[str, Any] = {
            "type": "step",
            "step": index,
            "scheduled": entries,
            "total_scheduled_tokens": out.total_num_scheduled_tokens,
            "preempted": preempted,
            "finished": oracle_scheduler.finished_ids(engine_outputs),
            "free_blocks_after_schedule": free_after_schedule,
            "free_blocks": pool.get_num_free_blocks(),
            "num_running": num_running,
            "num_waiting": num_waiting,
            "kv_cache_usage": oracle_common.rounded(sched.get_kv_cache_usage()),
            "prefix_cache": oracle_scheduler.prefix_stats_json(engine_outputs),
        }
        if self.cfg["enable_kv_cache_events"]:
            line["kv_events"] = [oracle_common.event_to_json(e) for e in self.sink.take()]
        if self.cfg["num_speculative_tokens"]:
            line["skip_drafts"] = bool(out.skip_drafts)
            line["spec_decoding"] = oracle_scheduler.spec_stats_json(engine_outputs)
        return line

    def add_spec_counts(self, entries: list[dict[str, Any]], out: Any) -> None:
        """With speculative decoding: each entry's drafts verified in this step."""
        if not self.cfg["num_speculative_tokens"]:
            return
        spec = out.scheduled_spec_decode_tokens
        for entry in entries:
            entry["spec"] = len(spec.get(entry["id"], ()))

    def add_arrivals(self, pending: list[tuple[float, dict[str, Any]]], nxt: int, step: int) -> int:
        """Add the requests of ``pending`` from index ``nxt`` on that arrive by ``step``;
        return the index of the next one."""
        while nxt < len(pending) and pending[nxt][1]["arrival_step"] <= step:
            arrival, spec = pending[nxt]
            req = oracle_common.make_request(
                spec, arrival, self.block_hasher, int(spec["max_tokens"])
            )
            self.sched.add_request(req)
            nxt += 1
        return nxt

    def summary(
        self, step: int, totals: dict[str, int], wall_s: float, loop_s: float
    ) -> dict[str, Any]:
        """The summary line after ``step`` steps."""
        return {
            "type": "summary",
            "steps": step,
            "finished": totals["finished"],
            "num_requests": len(self.trace),
            "total_preemption_events": totals["preempted"],
            "total_scheduled_tokens": totals["tokens"],
            "free_blocks_end": self.sched.kv_cache_manager.block_pool.get_num_free_blocks(),
            "wall_s": round(wall_s, 3),
            "sched_loop_s": round(loop_s, 3),
            "steps_per_s": round(step / loop_s, 1) if loop_s > 0 else 0.0,
        }

    def run(self) -> Iterable[dict[str, Any]]:
        """Yield the header, every step line and the summary."""
        t_start = time.perf_counter()
        yield self.build()
        pending = oracle_common.ordered_trace(self.trace)
        aborts = abort_schedule(pending, "abort_step")
        during = abort_schedule(pending, "abort_in_step")
        next_abort = next_during = 0
        nxt, step, loop_s = 0, 0, 0.0
        totals = {"finished": 0, "preempted": 0, "tokens": 0}
        while True:
            nxt = self.add_arrivals(pending, nxt, step)
            due, next_abort = due_ids(aborts, next_abort, step)
            due, self.deferred = self.deferred + due, []
            self.aborted = [rid for rid in due if self.abort(rid)]
            self.in_step, next_during = due_ids(during, next_during, step)
            if nxt == len(pending) and not self.has_work():
                break
            t0 = time.perf_counter()
            line = self.step(step)
            loop_s += time.perf_counter() - t0
            if self.aborted:
                line["aborted"] = self.aborted
            totals["finished"] += len(line["finished"])
            totals["preempted"] += len(line["preempted"])
            totals["tokens"] += line["total_scheduled_tokens"]
            yield line
            step += 1
        yield self.summary(step, totals, time.perf_counter() - t_start, loop_s)


def abort_schedule(
    pending: list[tuple[float, dict[str, Any]]], key: str
) -> list[tuple[int, int, str]]:
    """``(step, arrival order, request id)`` of every request with an abort step under
    ``key`` (``abort_step`` or ``abort_in_step``), in the order they come."""
    return sorted(
        (int(spec[key]), i, str(spec["request_id"]))
        for i, (_, spec) in enumerate(pending)
        if spec.get(key) is not None
    )


def due_ids(schedule: list[tuple[int, int, str]], start: int, step: int) -> tuple[list[str], int]:
    """The ids of ``schedule`` from index ``start`` on that are due by ``step``, and
    the index of the next entry."""
    ids = []
    while start < len(schedule) and schedule[start][0] <= step:
        ids.append(schedule[start][2])
        start += 1
    return ids, start
