"""Replay a step-indexed trace through the Scheduler with a fake model.

The fake model samples one fixed token (``sample_token_id``) for every scheduled
request whose prefill is complete after this step, and none for a partial prefill
chunk. Output is JSON lines: a header, one line per engine step, a summary; the
schema and replay rules are those of kvsim's vLLM oracle (the same lines vLLM 0.33.0
itself produces when driven this way), so the two can be compared line by line.

Synchronous (``async_scheduling`` false): each step schedules, samples and applies
its own output. Asynchronous: each step is one iteration of the engine core's batch
queue (:class:`kvcore.batch_queue.BatchQueue` over an
:class:`kvcore.async_scheduler.AsyncScheduler`): it schedules a batch, and applies
the output of the oldest batch in flight only when the queue is full or nothing more
can be scheduled. Its step lines add ``applied_step`` (the step whose batch's output
was applied in this step, or null), ``new_tokens`` (requests that got a token from
it), ``in_flight`` (steps whose batches are still queued, oldest first) and per
scheduled request ``placeholders`` (output placeholders after the step); their
``finished``, ``prefix_cache`` (null when no output was applied) and ``kv_events``
come with the applied output, as vLLM reports them.

A trace request with ``abort_step`` is aborted after the adds of that step, before
its ``schedule()``: ``Scheduler.finish_requests([id], FINISHED_ABORTED)``, one call per
request in arrival order (what vLLM's ``EngineCore.abort_requests`` does for each
client abort in its input queue). One with ``abort_in_step`` is aborted while that
step runs, after its ``schedule()`` and before ``update_from_output`` (vLLM's aborts
queue, read just before an output is applied); an async iteration that applies no
output leaves it to the start of the next step (the abort's copy in the input
queue). A step line whose aborts ended requests lists them under ``aborted`` (those
before ``schedule()`` first); lines without aborts are unchanged.

With speculative decoding (``num_speculative_tokens`` > 0, ``speculative_method``)
the fake model also drafts and verifies, by the rules of :mod:`kvcore.replay_spec`:
a request that verifies drafts samples ``1 + accepted`` tokens; after a synchronous
step that ran, each scheduled request gets its next drafts
(``update_draft_token_ids``), unless the step's ``skip_drafts`` says no request can
use them. Step lines then add per scheduled request ``spec`` (drafts verified), and
``skip_drafts`` and ``spec_decoding`` (the applied output's drafts, draft tokens,
accepted tokens and accepted tokens per position, or null).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kvcore.batch_queue import BatchQueue, SampleFn
from kvcore.block_hashing import BlockHasher
from kvcore.replay_config import ReplayConfig, build_scheduler, resolve_max_model_len
from kvcore.replay_lines import finish_entries, header_line, prefix_cache_json, scheduled_entries
from kvcore.replay_model import fake_sampler, propose_drafts
from kvcore.replay_spec import spec_stats_json
from kvcore.replay_trace import TraceRequest
from kvcore.request import LoRARequest, Request, RequestStatus
from kvcore.scheduler import Scheduler

__all__ = [
    "ReplayConfig",
    "build_scheduler",
    "fake_sampler",
    "propose_drafts",
    "replay",
    "resolve_max_model_len",
]


class _TraceFeed:
    """The trace's arrivals and client aborts, released step by step (arrivals in
    ``arrival_step`` order, ties in trace order)."""

    def __init__(self, trace: list[TraceRequest], hasher: BlockHasher) -> None:
        order = sorted(range(len(trace)), key=lambda i: trace[i].arrival_step)
        self.pending = [(trace[i], i_sorted) for i_sorted, i in enumerate(order)]
        self.hasher = hasher
        self.reqs: dict[str, Request] = {}
        """Every request added so far, by id."""
        self.next_idx = 0
        self.before = sorted(
            (tr.abort_step, i, tr.request_id) for tr, i in self.pending if tr.abort_step is not None
        )
        self.during = sorted(
            (tr.abort_in_step, i, tr.request_id)
            for tr, i in self.pending
            if tr.abort_in_step is not None
        )
        self.next_before = self.next_during = 0

    @property
    def all_arrived(self) -> bool:
        """Whether every request of the trace was added."""
        return self.next_idx == len(self.pending)

    def admit(self, scheduler: Scheduler, step: int) -> None:
        """Add the requests that arrive by ``step``."""
        pending = self.pending
        while self.next_idx < len(pending) and pending[self.next_idx][0].arrival_step <= step:
            tr, i = pending[self.next_idx]
            req = Request(
                tr.request_id,
                tr.prompt_token_ids,
                tr.max_tokens,
                arrival_time=tr.arrival_step + i * 1e-9,
                priority=tr.priority,
                lora_request=LoRARequest.from_id(tr.lora_id) if tr.lora_id else None,
                cache_salt=tr.cache_salt,
                block_hasher=self.hasher,
            )
            scheduler.add_request(req)
            self.reqs[tr.request_id] = req
            self.next_idx += 1

    def aborts_before(self, step: int) -> list[str]:
        """Ids whose ``abort_step`` is due by ``step`` (aborted before its schedule)."""
        due = []
        while self.next_before < len(self.before) and self.before[self.next_before][0] <= step:
            due.append(self.before[self.next_before][2])
            self.next_before += 1
        return due

    def aborts_during(self, step: int) -> list[str]:
        """Ids whose ``abort_in_step`` is due by ``step`` (aborted while it runs)."""
        due = []
        while self.next_during < len(self.during) and self.during[self.next_during][0] <= step:
            due.append(self.during[self.next_during][2])
            self.next_during += 1
        return due


def _checked_max_model_len(trace: list[TraceRequest], config: ReplayConfig) -> int:
    """The replay's ``max_model_len``; raises ValueError for an empty trace or a
    prompt that does not fit it."""
    if not trace:
        raise ValueError("the trace holds no requests")
    max_model_len = resolve_max_model_len(config, trace)
    for r in trace:
        if len(r.prompt_token_ids) >= max_model_len:
            raise ValueError(
                f"request {r.request_id}: prompt of {len(r.prompt_token_ids)} "
                f"tokens does not fit max_model_len {max_model_len}"
            )
    return max_model_len


def replay(
    trace: list[TraceRequest], config: ReplayConfig, trace_name: str = "trace"
) -> Iterator[dict[str, Any]]:
    """Yield the header, one record per step, then the summary."""
    max_model_len = _checked_max_model_len(trace, config)
    scheduler = build_scheduler(config, max_model_len)
    hasher = BlockHasher.from_name(
        config.block_size,
        config.prefix_caching_hash_algo,
        config.none_hash_seed,
        scheduler.num_hash_lookahead_tokens,
    )
    yield header_line(config, scheduler, trace_name, len(trace), max_model_len, hasher)
    feed = _TraceFeed(trace, hasher)
    reqs = feed.reqs
    step = 0
    totals = {"finished": 0, "preemptions": 0, "tokens": 0}
    pool = scheduler.kv_cache_manager.block_pool
    sample = fake_sampler(config.sample_token_id)
    queue = BatchQueue(scheduler, sample) if config.async_scheduling else None
    deferred: list[str] = []
    while True:
        feed.admit(scheduler, step)
        aborted = _abort(scheduler, deferred + feed.aborts_before(step))
        in_step = feed.aborts_during(step)
        deferred = []
        if queue is None:
            if feed.all_arrived and not scheduler.has_requests():
                break
            line = _step(scheduler, sample, reqs, step, config, pool, totals, in_step, aborted)
        else:
            if feed.all_arrived and not queue.has_work():
                break
            line, applied = _async_step(queue, reqs, config, pool, totals, in_step, aborted)
            if not applied:
                deferred = in_step
        if aborted:
            line["aborted"] = aborted
        yield line
        step += 1
    yield {
        "type": "summary",
        "steps": step,
        "finished": totals["finished"],
        "num_requests": len(trace),
        "total_preemption_events": totals["preemptions"],
        "total_scheduled_tokens": totals["tokens"],
        "free_blocks_end": pool.get_num_free_blocks(),
    }


def _abort(scheduler: Scheduler, request_ids: list[str]) -> list[str]:
    """Abort each request in turn (one ``finish_requests`` call each); the ids ended."""
    ended = []
    for rid in request_ids:
        for r in scheduler.finish_requests([rid], RequestStatus.FINISHED_ABORTED):
            ended.append(r.request_id)
    return ended


def _step(
    scheduler: Scheduler,
    sample: SampleFn,
    reqs: dict[str, Request],
    step: int,
    config: ReplayConfig,
    pool,
    totals: dict[str, int],
    in_step: list[str],
    aborted: list[str],
) -> dict[str, Any]:
    out = scheduler.schedule()
    free_after_schedule = pool.get_num_free_blocks()
    sampled = sample(scheduler, out)
    entries = scheduled_entries(out, reqs, sampled)
    aborted += _abort(scheduler, in_step)  # the aborts queue, read before the output
    result = scheduler.update_from_output(out, sampled)
    propose_drafts(scheduler, out, config.sample_token_id)
    scheduled = finish_entries(entries, scheduler, config, placeholders=False)
    totals["finished"] += len(result.finished_req_ids)
    totals["preemptions"] += len(out.preempted_req_ids)
    totals["tokens"] += out.total_num_scheduled_tokens
    line = {
        "type": "step",
        "step": step,
        "scheduled": scheduled,
        "total_scheduled_tokens": out.total_num_scheduled_tokens,
        "preempted": sorted(out.preempted_req_ids),
        "finished": result.finished_req_ids,
        "free_blocks_after_schedule": free_after_schedule,
        "free_blocks": pool.get_num_free_blocks(),
        "num_running": len(scheduler.running),
        "num_waiting": len(scheduler.waiting),
        "kv_cache_usage": round(scheduler.get_kv_cache_usage(), 6),
        "prefix_cache": prefix_cache_json(result),
    }
    if config.enable_kv_cache_events:
        line["kv_events"] = [e.to_json() for e in result.kv_events]
    if config.num_speculative_tokens:
        line["skip_drafts"] = out.skip_drafts
        line["spec_decoding"] = spec_stats_json(result.spec_decoding_stats)
    return line


def _async_step(
    queue: BatchQueue,
    reqs: dict[str, Request],
    config: ReplayConfig,
    pool,
    totals: dict[str, int],
    in_step: list[str],
    aborted: list[str],
) -> tuple[dict[str, Any], bool]:
    """One engine iteration of the batch queue, as one step line, and whether it
    applied an output. ``in_step`` are aborted just before that output is applied
    (their ids added to ``aborted``); an iteration that applies none leaves them to the
    caller, for the next step."""
    scheduler = queue.scheduler
    step = queue.iteration
    batch, must_wait = queue.schedule_next()
    free_after_schedule = pool.get_num_free_blocks()
    entries = []
    preempted: list[str] = []
    total = 0
    if batch is not None:
        out = batch.scheduler_output
        entries = scheduled_entries(out, reqs, batch.sampled_token_ids)
        preempted = sorted(out.preempted_req_ids)
        total = out.total_num_scheduled_tokens
    applied = result = None
    if must_wait:
        aborted += _abort(scheduler, in_step)
        applied, result = queue.apply_oldest()
    scheduled = finish_entries(entries, scheduler, config, placeholders=True)
    finished = result.finished_req_ids if result is not None else []
    totals["finished"] += len(finished)
    totals["preemptions"] += len(preempted)
    totals["tokens"] += total
    line: dict[str, Any] = {
        "type": "step",
        "step": step,
        "scheduled": scheduled,
        "total_scheduled_tokens": total,
        "preempted": preempted,
        "applied_step": applied.step if applied is not None else None,
        "new_tokens": list(result.new_token_ids) if result is not None else [],
        "finished": finished,
        "in_flight": queue.in_flight_steps(),
        "free_blocks_after_schedule": free_after_schedule,
        "free_blocks": pool.get_num_free_blocks(),
        "num_running": len(scheduler.running),
        "num_waiting": len(scheduler.waiting),
        "kv_cache_usage": round(scheduler.get_kv_cache_usage(), 6),
        "prefix_cache": prefix_cache_json(result) if result is not None else None,
    }
    if config.enable_kv_cache_events:
        line["kv_events"] = [e.to_json() for e in result.kv_events] if result is not None else []
    if config.num_speculative_tokens:
        line["skip_drafts"] = batch.scheduler_output.skip_drafts if batch is not None else None
        line["spec_decoding"] = spec_stats_json(result.spec_decoding_stats) if result else None
    return line, must_wait
