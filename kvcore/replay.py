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
from dataclasses import asdict, dataclass
from typing import Any

from kvcore import VLLM_VERSION, __version__
from kvcore.async_scheduler import BATCH_QUEUE_SIZE, AsyncScheduler
from kvcore.batch_queue import BatchQueue, SampleFn
from kvcore.block_hashing import DEFAULT_NONE_HASH_SEED, BlockHasher
from kvcore.kv_cache_interface import (
    AttentionSpec,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from kvcore.replay_spec import num_accepted, num_drafts, spec_stats_json
from kvcore.replay_trace import TraceRequest
from kvcore.request import LoRARequest, Request, RequestStatus
from kvcore.sched_output import EngineStepOutput, SchedulerOutput
from kvcore.scheduler import Scheduler
from kvcore.scheduler_config import SchedulerConfig
from kvcore.spec_decode import SpeculativeConfig

KV_GROUP_KINDS = ("full", "sliding_window", "chunked_local")


@dataclass(frozen=True)
class ReplayConfig:
    """Replay knobs; names and defaults follow vLLM 0.33.0's engine arguments.

    ``max_model_len`` None means the trace's largest prompt + max_tokens.
    ``kv_groups`` lists one attention kind per KV cache group.
    ``async_scheduling``: replay vLLM's async engine loop (an ``AsyncScheduler``
    driven through a batch queue of 2) instead of the synchronous one.
    """

    block_size: int = 16
    num_gpu_blocks: int = 1024
    max_num_seqs: int = 128
    max_num_batched_tokens: int = 2048
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    long_prefill_token_threshold: int = 0
    policy: str = "fcfs"
    watermark: float = 0.0
    scheduler_reserve_full_isl: bool = True
    kv_groups: tuple[str, ...] = ("full",)
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    prefix_caching_hash_algo: str = "sha256"
    max_model_len: int | None = None
    sample_token_id: int = 7
    num_lookahead_tokens: int = 0
    enable_kv_cache_events: bool = False
    dump_block_tables: bool = False
    none_hash_seed: str = DEFAULT_NONE_HASH_SEED
    async_scheduling: bool = False
    num_speculative_tokens: int = 0
    speculative_method: str = "ngram"

    def __post_init__(self) -> None:
        checks = [
            ("block_size", self.block_size, 1),
            ("num_gpu_blocks", self.num_gpu_blocks, 2),
            ("max_num_seqs", self.max_num_seqs, 1),
            ("max_num_batched_tokens", self.max_num_batched_tokens, 1),
            ("long_prefill_token_threshold", self.long_prefill_token_threshold, 0),
            ("sample_token_id", self.sample_token_id, 0),
            ("num_lookahead_tokens", self.num_lookahead_tokens, 0),
            ("num_speculative_tokens", self.num_speculative_tokens, 0),
        ]
        for name, value, low in checks:
            if not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"watermark must be in [0, 1), got {self.watermark}")
        if not self.kv_groups:
            raise ValueError("kv_groups must name at least one group")
        for kind in self.kv_groups:
            if kind not in KV_GROUP_KINDS:
                raise ValueError(
                    f"kv_groups: unknown kind {kind!r}; allowed: {', '.join(KV_GROUP_KINDS)}"
                )
        if "sliding_window" in self.kv_groups and (self.sliding_window or 0) < 1:
            raise ValueError("kv_groups has sliding_window: set sliding_window to an integer >= 1")
        if "chunked_local" in self.kv_groups and (self.attention_chunk_size or 0) < 1:
            raise ValueError(
                "kv_groups has chunked_local: set attention_chunk_size to an integer >= 1"
            )
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be an integer >= 2, got {self.max_model_len}")
        from kvcore.block_hashing import get_hash_fn_by_name

        get_hash_fn_by_name(self.prefix_caching_hash_algo)
        self.speculative_config()  # raises on an unknown method

    def speculative_config(self) -> SpeculativeConfig | None:
        if self.num_speculative_tokens == 0:
            return None
        return SpeculativeConfig(self.speculative_method, self.num_speculative_tokens)

    def kv_cache_spec(self, kind: str) -> AttentionSpec:
        """A tiny spec of one group: block counts matter here, not bytes."""
        if kind == "sliding_window":
            return SlidingWindowSpec(block_size=self.block_size, sliding_window=self.sliding_window)
        if kind == "chunked_local":
            return ChunkedLocalAttentionSpec(
                block_size=self.block_size, attention_chunk_size=self.attention_chunk_size
            )
        return FullAttentionSpec(block_size=self.block_size)

    def kv_cache_config(self) -> KVCacheConfig:
        groups = [
            KVCacheGroupSpec([f"layer.{i}"], self.kv_cache_spec(kind))
            for i, kind in enumerate(self.kv_groups)
        ]
        return KVCacheConfig(
            num_blocks=self.num_gpu_blocks, kv_cache_tensors=[], kv_cache_groups=groups
        )


def resolve_max_model_len(config: ReplayConfig, trace: list[TraceRequest]) -> int:
    if config.max_model_len is not None:
        return config.max_model_len
    return max(len(r.prompt_token_ids) + r.max_tokens for r in trace)


def build_scheduler(config: ReplayConfig, max_model_len: int) -> Scheduler:
    sched_config = SchedulerConfig(
        max_model_len=max_model_len,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_num_seqs=config.max_num_seqs,
        enable_chunked_prefill=config.enable_chunked_prefill,
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        policy=config.policy,
        scheduler_reserve_full_isl=config.scheduler_reserve_full_isl,
        num_lookahead_tokens=config.num_lookahead_tokens,
    )
    cls = AsyncScheduler if config.async_scheduling else Scheduler
    return cls(
        sched_config,
        config.kv_cache_config(),
        enable_caching=config.enable_prefix_caching,
        watermark=config.watermark,
        enable_kv_cache_events=config.enable_kv_cache_events,
        speculative_config=config.speculative_config(),
    )


def fake_sampler(token_id: int) -> SampleFn:
    """The replay's model: ``token_id`` for each scheduled request whose prefill
    completes in the step, repeated ``1 + accepted`` times for one that verifies
    drafts (:func:`kvcore.replay_spec.num_accepted`); nothing for a partial chunk."""

    def sample(scheduler: Scheduler, out: SchedulerOutput) -> dict[str, list[int]]:
        requests = scheduler.requests
        spec = out.scheduled_spec_decode_tokens
        sampled = {}
        for rid in out.num_scheduled_tokens:
            req = requests[rid]
            if req.is_prefill_chunk:
                continue
            drafts = spec.get(rid)
            n = 1 + num_accepted(rid, req.num_tokens, len(drafts)) if drafts else 1
            sampled[rid] = [token_id] * n
        return sampled

    return sample


def propose_drafts(scheduler: Scheduler, out: SchedulerOutput, token_id: int) -> None:
    """After a synchronous step that ran: the fake drafter's proposals for its
    requests (:func:`kvcore.replay_spec.num_drafts`), as vLLM's engine core hands the
    model runner's to ``update_draft_token_ids``."""
    if not scheduler.num_spec_tokens or not out.total_num_scheduled_tokens or out.skip_drafts:
        return
    k = scheduler.num_spec_tokens
    drafts = {}
    for rid in out.num_scheduled_tokens:
        req = scheduler.requests.get(rid)
        if req is not None and not req.is_finished():
            drafts[rid] = [token_id] * num_drafts(rid, req.num_tokens, k)
    scheduler.update_draft_token_ids(drafts)


def _header(
    config: ReplayConfig,
    scheduler: Scheduler,
    trace_name: str,
    num_requests: int,
    max_model_len: int,
    hasher: BlockHasher,
) -> dict[str, Any]:
    cfg = asdict(config)
    cfg.pop("none_hash_seed")
    cfg.update(
        batch_queue_size=BATCH_QUEUE_SIZE if config.async_scheduling else 1,
        max_model_len=max_model_len,
        kv_groups=list(config.kv_groups),
        max_num_scheduled_tokens=config.max_num_batched_tokens,
        coordinator=type(scheduler.kv_cache_manager.coordinator).__name__,
        managers=[
            type(m).__name__ for m in scheduler.kv_cache_manager.coordinator.single_type_managers
        ],
    )
    return {
        "type": "header",
        "kvsim_version": __version__,
        "vllm_version": VLLM_VERSION,
        "trace": trace_name,
        "num_requests": num_requests,
        "sample_token_id": config.sample_token_id,
        "config": cfg,
        "none_hash_seed": config.none_hash_seed,
        "none_hash": hasher.none_hash.hex(),
    }


def replay(
    trace: list[TraceRequest], config: ReplayConfig, trace_name: str = "trace"
) -> Iterator[dict[str, Any]]:
    """Yield the header, one record per step, then the summary."""
    if not trace:
        raise ValueError("the trace holds no requests")
    max_model_len = resolve_max_model_len(config, trace)
    for r in trace:
        if len(r.prompt_token_ids) >= max_model_len:
            raise ValueError(
                f"request {r.request_id}: prompt of {len(r.prompt_token_ids)} "
                f"tokens does not fit max_model_len {max_model_len}"
            )
    scheduler = build_scheduler(config, max_model_len)
    hasher = BlockHasher.from_name(
        config.block_size,
        config.prefix_caching_hash_algo,
        config.none_hash_seed,
        scheduler.num_hash_lookahead_tokens,
    )
    yield _header(config, scheduler, trace_name, len(trace), max_model_len, hasher)
    order = sorted(range(len(trace)), key=lambda i: trace[i].arrival_step)
    pending = [(trace[i], i_sorted) for i_sorted, i in enumerate(order)]
    reqs: dict[str, Request] = {}
    next_idx = step = 0
    totals = {"finished": 0, "preemptions": 0, "tokens": 0}
    pool = scheduler.kv_cache_manager.block_pool
    queue = None
    sample = fake_sampler(config.sample_token_id)
    if config.async_scheduling:
        queue = BatchQueue(scheduler, sample)
    aborts = sorted(
        (tr.abort_step, i, tr.request_id) for tr, i in pending if tr.abort_step is not None
    )
    during = sorted(
        (tr.abort_in_step, i, tr.request_id) for tr, i in pending if tr.abort_in_step is not None
    )
    next_abort = next_during = 0
    deferred: list[str] = []
    while True:
        while next_idx < len(pending) and pending[next_idx][0].arrival_step <= step:
            tr, i = pending[next_idx]
            req = Request(
                tr.request_id,
                tr.prompt_token_ids,
                tr.max_tokens,
                arrival_time=tr.arrival_step + i * 1e-9,
                priority=tr.priority,
                lora_request=LoRARequest.from_id(tr.lora_id) if tr.lora_id else None,
                cache_salt=tr.cache_salt,
                block_hasher=hasher,
            )
            scheduler.add_request(req)
            reqs[tr.request_id] = req
            next_idx += 1
        due = deferred
        while next_abort < len(aborts) and aborts[next_abort][0] <= step:
            due.append(aborts[next_abort][2])
            next_abort += 1
        aborted = _abort(scheduler, due)
        in_step: list[str] = []
        while next_during < len(during) and during[next_during][0] <= step:
            in_step.append(during[next_during][2])
            next_during += 1
        deferred = []
        if queue is None:
            if next_idx == len(pending) and not scheduler.has_requests():
                break
            line = _step(scheduler, sample, reqs, step, config, pool, totals, in_step, aborted)
        else:
            if next_idx == len(pending) and not queue.has_work():
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
    entries = _scheduled_entries(out, reqs, sampled)
    aborted += _abort(scheduler, in_step)  # the aborts queue, read before the output
    result = scheduler.update_from_output(out, sampled)
    propose_drafts(scheduler, out, config.sample_token_id)
    scheduled = []
    for entry, req in entries:
        if not req.is_finished():  # finished requests are gone from the scheduler
            entry["computed_after"] = req.num_computed_tokens
            entry["num_tokens"] = req.num_tokens
            if config.dump_block_tables:
                entry["block_table"] = [
                    list(b) for b in scheduler.kv_cache_manager.get_block_ids(req.request_id)
                ]
        scheduled.append(entry)
    stats = result.prefix_cache_stats
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
        "prefix_cache": {
            k: getattr(stats, k)
            for k in (
                "requests",
                "queries",
                "hits",
                "preempted_requests",
                "preempted_queries",
                "preempted_hits",
            )
        },
    }
    if config.enable_kv_cache_events:
        line["kv_events"] = [e.to_json() for e in result.kv_events]
    if config.num_speculative_tokens:
        line["skip_drafts"] = out.skip_drafts
        line["spec_decoding"] = spec_stats_json(result.spec_decoding_stats)
    return line


def _scheduled_entries(
    out: SchedulerOutput, reqs: dict[str, Request], sampled: Any
) -> list[tuple[dict[str, Any], Request]]:
    """One entry per scheduled request (before its output): kind, tokens, new blocks."""
    new_ids = set(out.scheduled_new_reqs)
    resumed_ids = set(out.scheduled_resumed_reqs)
    entries = []
    for rid, n in out.num_scheduled_tokens.items():
        block_ids = out.get_new_block_ids(rid)
        if rid in resumed_ids:
            kind = "resumed"
        elif rid in new_ids:
            kind = "new"
        else:
            kind = "running"
            if not any(block_ids):
                block_ids = ()
        entry = {
            "id": rid,
            "kind": kind,
            "n": n,
            "new_block_ids": [list(b) for b in block_ids],
            "sampled": bool(sampled.get(rid)),
        }
        if out.num_spec_tokens_to_schedule:
            entry["spec"] = len(out.scheduled_spec_decode_tokens.get(rid, ()))
        entries.append((entry, reqs[rid]))
    return entries


def _prefix_cache_json(result: EngineStepOutput) -> dict[str, int] | None:
    stats = result.prefix_cache_stats
    if stats is None:
        return None
    return {
        k: getattr(stats, k)
        for k in (
            "requests",
            "queries",
            "hits",
            "preempted_requests",
            "preempted_queries",
            "preempted_hits",
        )
    }


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
        entries = _scheduled_entries(out, reqs, batch.sampled_token_ids)
        preempted = sorted(out.preempted_req_ids)
        total = out.total_num_scheduled_tokens
    applied = result = None
    if must_wait:
        aborted += _abort(scheduler, in_step)
        applied, result = queue.apply_oldest()
    scheduled = []
    for entry, req in entries:
        if not req.is_finished():  # finished requests are gone from the scheduler
            entry["computed_after"] = req.num_computed_tokens
            entry["num_tokens"] = req.num_tokens
            entry["placeholders"] = req.num_output_placeholders
            if config.dump_block_tables:
                entry["block_table"] = [
                    list(b) for b in scheduler.kv_cache_manager.get_block_ids(req.request_id)
                ]
        scheduled.append(entry)
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
        "prefix_cache": _prefix_cache_json(result) if result is not None else None,
    }
    if config.enable_kv_cache_events:
        line["kv_events"] = [e.to_json() for e in result.kv_events] if result is not None else []
    if config.num_speculative_tokens:
        line["skip_drafts"] = batch.scheduler_output.skip_drafts if batch is not None else None
        line["spec_decoding"] = spec_stats_json(result.spec_decoding_stats) if result else None
    return line, must_wait
