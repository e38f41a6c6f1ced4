"""The scheduler side of vLLM's KV offloading connector, with the CPU tier.

Mirrors ``OffloadingConnectorScheduler``
(``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``, reached
through ``OffloadingConnector`` in ``.../v1/offloading_connector.py``) of vLLM
0.33.0, for what ``--kv-offloading-size`` turns on: the ``OffloadingConnector`` with
``CPUOffloadingSpec`` (LRU), ``kv_role="kv_both"``, one chunk per GPU block unless
``blocks_per_chunk`` says otherwise, and only prompt blocks offloaded
(``offload_prompt_only``, vLLM's default).

What it decides, step by step (the worker side only copies and reports back):

* **Stores.** In ``build_connector_meta`` (end of ``schedule()``), for every request
  scheduled in the step and every request finished since the last step, the chunks
  its prompt fills by the end of the step (for a finished request: all it computed)
  that were not offered yet are offered to the CPU tier (``prepare_store``). Chunks
  the tier already holds are skipped (their recency is refreshed), new ones become
  one store job. When the tier cannot make room the offer is repeated next step.
  A request finishing does not wait for its stores: its GPU blocks are freed at once,
  and a store whose source block is handed to another request is *flushed* (the
  worker waits for it before the step runs: ``jobs_to_flush``).
* **Loads.** For a waiting request, after the GPU prefix-cache lookup,
  ``get_num_new_matched_tokens`` counts the whole chunks after the GPU hit that the
  tier holds in a row (``HIT``). It answers None (the scheduler skips the request
  this step) when the request still has transfers in flight, when one of those
  chunks is still being written (``HIT_PENDING``), or when another request is loading
  one of them. A positive answer is always an asynchronous load: the scheduler
  allocates the blocks, ``update_state_after_alloc`` pins the chunks and makes one
  load job, and the request waits in ``WAITING_FOR_REMOTE_KVS`` until the worker
  reports it in ``finished_recving``.
* **Completions.** ``update_connector_output`` takes the worker's finished job ids
  (``OffloadingWorkerMetadata.completed_jobs``, counted over workers): a finished
  store makes its chunks loadable, a finished load unpins them.

Left out (vLLM features kvsim does not model; :meth:`OffloadingConnectorScheduler.
check_supported` refuses them): sliding-window, chunked-local and Mamba groups (and
so partial tails and EAGLE groups), synchronous loads (``sync_load_budget_bytes``),
per-request ``max_load_tokens`` / ``max_offload_tokens``, load tier filters, cache
resets, KV events and metrics. The vLLM worker does not support failed transfers
(``OffloadingConnectorWorker.get_finished`` asserts success), so neither does this.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import Any

from kvcore.cpu_offload_manager import (
    CPUOffloadingManager,
    LookupResult,
    OffloadKey,
    OffloadReqContext,
    make_offload_key,
)
from kvcore.kv_cache_interface import FullAttentionSpec, KVCacheConfig
from kvcore.kv_cache_manager import KVCacheBlocks
from kvcore.kv_connector_output import KVConnectorOutput
from kvcore.request import Request, RequestStatus
from kvcore.sched_output import SchedulerOutput
from kvcore.utils import cdiv


@dataclass(slots=True)
class TransferJob:
    """Mirrors ``TransferJob`` (``offloading/common.py``): one load or store of one
    request. ``gpu_block_ids``: GPU blocks read (store) or written (load), group by
    group; ``chunk_ids``: the CPU chunks; ``keys``: their offload keys in order."""

    req_id: str
    keys: list[OffloadKey]
    gpu_block_ids: list[int]
    chunk_ids: list[int]
    is_store: bool


@dataclass(slots=True)
class OffloadingConnectorMetadata:
    """Mirrors ``OffloadingConnectorMetadata``: what one step asks of the worker.
    Keyed by job id (one counter for loads and stores)."""

    load_jobs: dict[int, TransferJob]
    store_jobs: dict[int, TransferJob]
    jobs_to_flush: set[int]
    evicted_keys: list[OffloadKey] = field(default_factory=list)
    """CPU chunks evicted to make room for this step's stores (not in vLLM's metadata;
    kept for reports)."""


@dataclass(slots=True)
class _GroupConfig:
    group_idx: int
    tokens_per_block: int
    tokens_per_chunk: int
    hashes_per_chunk: int


@dataclass(slots=True)
class _JobStatus:
    """Mirrors ``TransferJobStatus``."""

    req_id: str
    pending_count: int
    keys: set[OffloadKey]
    is_store: bool
    deferred_fence_block_ids: list[int] = field(default_factory=list)


class _GroupState:
    """Mirrors ``RequestGroupState``."""

    __slots__ = ("offload_keys", "block_ids", "next_stored_chunk_idx")

    def __init__(self) -> None:
        self.offload_keys: list[OffloadKey] = []
        self.block_ids: list[int] = []
        self.next_stored_chunk_idx = 0


class _RequestState:
    """Mirrors ``RequestOffloadState``."""

    __slots__ = (
        "req",
        "ctx",
        "groups",
        "group_states",
        "blocks_per_chunk",
        "num_locally_computed_tokens",
        "transfer_jobs",
        "finished_signaled",
    )

    def __init__(self, req: Request, groups: Sequence[_GroupConfig], bpc: int) -> None:
        self.req = req
        self.ctx = OffloadReqContext(req.request_id)
        self.groups = groups
        self.group_states = tuple(_GroupState() for _ in groups)
        self.blocks_per_chunk = bpc
        self.num_locally_computed_tokens = 0
        self.transfer_jobs: set[int] = set()
        self.finished_signaled = False

    def update_offload_keys(self) -> None:
        hashes = self.req.block_hashes
        for gc, gs in zip(self.groups, self.group_states):
            hpc = gc.hashes_per_chunk
            start = hpc * len(gs.offload_keys) + hpc - 1
            for block_hash in islice(hashes, start, None, hpc):
                key = make_offload_key(block_hash, gc.group_idx)
                gs.offload_keys.append(key)
                self.ctx.set_offload_key_position(key, len(gs.offload_keys) * gc.tokens_per_chunk)

    def storable_chunks(self, gc: _GroupConfig, gs: _GroupState, num_tokens: int) -> int:
        return min(
            num_tokens // gc.tokens_per_chunk,
            len(gs.block_ids) // self.blocks_per_chunk,
            len(gs.offload_keys),
        )

    def advance_stored_idx(self, num_tokens: int) -> None:
        for gc, gs in zip(self.groups, self.group_states):
            gs.next_stored_chunk_idx = max(
                gs.next_stored_chunk_idx, self.storable_chunks(gc, gs, num_tokens)
            )


class OffloadingConnectorScheduler:
    """Mirrors vLLM 0.33.0's ``OffloadingConnectorScheduler`` (and the scheduler-role
    ``OffloadingConnector`` methods that forward to it) for full-attention KV groups.

    ``num_cpu_chunks``: the CPU tier's capacity in chunks
    (:func:`kvcore.cpu_offload_manager.cpu_offload_num_chunks`). ``num_workers``: the
    engine's world size (each job completes when every worker reported it)."""

    is_kv_consumer = True
    """``kv_role="kv_both"``: the engine loads KV through this connector."""
    requires_kv_delivery = False
    """vLLM: a best-effort cache; a dropped store is a later miss."""
    kv_load_failure_policy = "fail"
    """vLLM's default (the offloading worker never reports a failed load)."""

    def __init__(
        self,
        kv_cache_config: KVCacheConfig,
        num_cpu_chunks: int,
        blocks_per_chunk: int = 1,
        offload_prompt_only: bool = True,
        enable_prefix_caching: bool = True,
        num_workers: int = 1,
    ) -> None:
        self.check_supported(kv_cache_config)
        self.groups = tuple(
            _GroupConfig(
                group_idx=i,
                tokens_per_block=g.kv_cache_spec.block_size,
                tokens_per_chunk=g.kv_cache_spec.block_size * blocks_per_chunk,
                hashes_per_chunk=blocks_per_chunk,
            )
            for i, g in enumerate(kv_cache_config.kv_cache_groups)
        )
        self.blocks_per_chunk = blocks_per_chunk
        self.offload_prompt_only = offload_prompt_only
        self.num_workers = num_workers
        self.manager = CPUOffloadingManager(num_cpu_chunks)
        self._req_status: dict[str, _RequestState] = {}
        self._current_batch_load_jobs: dict[int, TransferJob] = {}
        self._current_batch_jobs_to_flush: set[int] = set()
        self._current_batch_allocated_block_ids: set[int] = set()
        self._current_batch_evicted: list[OffloadKey] = []
        self._chunks_being_loaded: set[OffloadKey] | None = set() if enable_prefix_caching else None
        self._job_counter = 0
        self._jobs: dict[int, _JobStatus] = {}
        self._block_id_to_pending_jobs: dict[int, set[int]] = {}

    @staticmethod
    def check_supported(kv_cache_config: KVCacheConfig) -> None:
        """Raise ValueError for KV layouts this port does not cover (see module)."""
        groups = kv_cache_config.kv_cache_groups
        if not groups:
            raise ValueError("KV offloading found no eligible cache groups")
        sizes = set()
        for g in groups:
            spec = g.kv_cache_spec
            if type(spec) is not FullAttentionSpec:
                raise ValueError(
                    f"KV offloading supports full-attention groups only, not {type(spec).__name__}"
                )
            sizes.add(spec.block_size)
        if len(sizes) != 1:
            raise ValueError("KV offloading needs one block size across groups")

    # -- requests ------------------------------------------------------------------

    def on_new_request(self, request: Request) -> None:
        """``on_new_request``: start tracking a request added to the scheduler."""
        state = _RequestState(request, self.groups, self.blocks_per_chunk)
        self.manager.on_new_request(state.ctx)
        self._req_status[request.request_id] = state

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        """Tokens past ``num_computed_tokens`` (the GPU hit) the CPU tier can load, and
        whether the load is asynchronous (always, when there is one). None: decide
        later (the scheduler skips the request this step)."""
        rs = self._req_status[request.request_id]
        for gs in rs.group_states:
            gs.block_ids.clear()
            gs.next_stored_chunk_idx = 0
        if rs.transfer_jobs:
            return None, False
        rs.update_offload_keys()
        rs.num_locally_computed_tokens = num_computed_tokens
        num_hit: int | None = 0 if request.skip_reading_prefix_cache else self._lookup(rs)
        return num_hit, bool(num_hit)

    def _maximal_prefix_lookup(self, keys: Iterable[OffloadKey]) -> int | None:
        hit_count = 0
        defer = False
        for key in keys:
            result = self.manager.lookup(key)
            if result is LookupResult.MISS:
                break
            if result is LookupResult.RETRY:
                defer = True
                continue
            hit_count += 1
            defer |= result is LookupResult.HIT_PENDING
        return None if defer else hit_count

    def _lookup(self, rs: _RequestState) -> int | None:
        """``_lookup_complete_chunks`` for full-attention groups only."""
        num_computed = rs.num_locally_computed_tokens
        max_hit = rs.req.num_tokens
        num_hit_tokens = 0
        defer = False
        lookup_groups: tuple[int, ...] = tuple(range(len(self.groups)))
        while lookup_groups:
            todo, lookup_groups = lookup_groups, ()
            for i in todo:
                gc = self.groups[i]
                keys = rs.group_states[i].offload_keys
                tpc = gc.tokens_per_chunk
                max_hit = min(max_hit, len(keys) * tpc)
                if max_hit - num_computed < tpc:
                    return 0
                num_chunks = min(cdiv(max_hit, tpc), len(keys))
                start = num_computed // tpc
                num_hit_chunks = self._maximal_prefix_lookup(keys[start:num_chunks])
                if num_hit_chunks == 0:
                    return 0
                if num_hit_chunks is None:
                    defer = True
                else:
                    max_hit = min(max_hit, tpc * (start + num_hit_chunks))
                new_num_hit_tokens = max_hit - num_computed
                if new_num_hit_tokens < tpc:
                    return 0
                if new_num_hit_tokens < num_hit_tokens and defer:
                    defer = False
                    lookup_groups = tuple(range(len(self.groups)))
                num_hit_tokens = new_num_hit_tokens
        if defer:
            return None
        if self._chunks_being_loaded:
            end = num_computed + num_hit_tokens
            for gc, gs in zip(self.groups, rs.group_states):
                tpc = gc.tokens_per_chunk
                keys = gs.offload_keys[num_computed // tpc : cdiv(end, tpc)]
                if any(k in self._chunks_being_loaded for k in keys):
                    return None
        return num_hit_tokens

    def update_state_after_alloc(
        self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int
    ) -> None:
        """After the scheduler allocated ``blocks`` (the request's whole table) for a
        hit of ``num_external_tokens`` CPU tokens: pin the chunks, make the load job."""
        for group_blocks in blocks.blocks:
            self._current_batch_allocated_block_ids.update(
                b.block_id for b in group_blocks if b.block_id != 0
            )
        if num_external_tokens == 0:
            return
        rs = self._req_status[request.request_id]
        num_local = rs.num_locally_computed_tokens
        num_cached = num_local + num_external_tokens
        keys_to_load: list[OffloadKey] = []
        dst_block_ids: list[int] = []
        bpc = self.blocks_per_chunk
        for gc, gs in zip(self.groups, rs.group_states):
            group_blocks = blocks.blocks[gc.group_idx]
            tpb = gc.tokens_per_block
            num_gpu_blocks = cdiv(num_cached, tpb)
            load_start = num_gpu_blocks
            for i in range(cdiv(num_local, tpb), num_gpu_blocks):
                b = group_blocks[i]
                if not b.is_null and b.block_hash is None:
                    load_start = i
                    break
            num_chunks = cdiv(num_cached, gc.tokens_per_chunk)
            if num_gpu_blocks - load_start:
                keys_to_load.extend(gs.offload_keys[load_start // bpc : num_chunks])
            dst_block_ids.extend(b.block_id for b in group_blocks[load_start:num_gpu_blocks])
            gs.next_stored_chunk_idx = num_chunks
        chunk_ids = self.manager.prepare_load(keys_to_load, rs.ctx)
        job_id = self._new_job_id()
        self._current_batch_load_jobs[job_id] = TransferJob(
            request.request_id, keys_to_load, dst_block_ids, chunk_ids, is_store=False
        )
        assert not rs.transfer_jobs, "a load is issued only without transfers in flight"
        rs.transfer_jobs.add(job_id)
        self._jobs[job_id] = _JobStatus(
            request.request_id, self.num_workers, set(keys_to_load), is_store=False
        )
        if self._chunks_being_loaded is not None:
            self._chunks_being_loaded.update(keys_to_load)

    def _new_job_id(self) -> int:
        job_id = self._job_counter
        self._job_counter += 1
        return job_id

    # -- end of schedule() ---------------------------------------------------------

    def build_connector_meta(
        self, scheduler_output: SchedulerOutput
    ) -> OffloadingConnectorMetadata:
        """``build_connector_meta``: called at the end of ``schedule()``, before the
        scheduled tokens are added to the requests' computed counts."""
        out = scheduler_output
        num_scheduled = out.num_scheduled_tokens
        self._update_req_states(out)
        for rid in out.preempted_req_ids:
            rs = self._req_status.get(rid)
            if rs is not None:
                self._current_batch_jobs_to_flush.update(
                    rs.transfer_jobs - self._current_batch_load_jobs.keys()
                )
        pending = self._block_id_to_pending_jobs
        if pending and not pending.keys().isdisjoint(self._current_batch_allocated_block_ids):
            for bid in self._current_batch_allocated_block_ids:
                if bid in pending:
                    self._current_batch_jobs_to_flush.update(pending[bid])
        # vLLM iterates the set as it comes (an order that depends on string hashing);
        # kvcore takes the ids sorted, so that runs are reproducible.
        finished = sorted(out.finished_req_ids)
        store_jobs = self._build_store_jobs(num_scheduled, finished)
        meta = OffloadingConnectorMetadata(
            load_jobs=self._current_batch_load_jobs,
            store_jobs=store_jobs,
            jobs_to_flush=self._current_batch_jobs_to_flush,
            evicted_keys=self._current_batch_evicted,
        )
        for rid in finished:
            rs = self._req_status.get(rid)
            if rs is None:
                continue
            rs.finished_signaled = True
            self.manager.on_request_finished(rs.ctx)
            if not rs.transfer_jobs:
                del self._req_status[rid]
        self._current_batch_load_jobs = {}
        self._current_batch_jobs_to_flush = set()
        self._current_batch_allocated_block_ids = set()
        self._current_batch_evicted = []
        return meta

    def _update_req_states(self, out: SchedulerOutput) -> None:
        """Follow the block tables: new and resumed requests carry their whole table,
        running ones the blocks added in this step."""
        new_ids = out.scheduled_new_reqs
        resumed = out.scheduled_resumed_reqs
        running = out.scheduled_running_reqs
        full_tables = set(new_ids) | set(resumed)
        new_blocks = out.req_to_new_blocks
        for rid in chain(new_ids, running, resumed):
            rs = self._req_status[rid]
            rs.update_offload_keys()
            if rid in full_tables:
                for gs in rs.group_states:
                    gs.block_ids.clear()
            groups = new_blocks[rid].get_block_ids()
            for gc, gs in zip(self.groups, rs.group_states):
                ids = groups[gc.group_idx]
                gs.block_ids.extend(ids)
                self._current_batch_allocated_block_ids.update(b for b in ids if b != 0)

    def _num_offloadable_tokens(self, req: Request, num_tokens: int) -> int:
        n = min(num_tokens, req.num_tokens)
        if self.offload_prompt_only:
            n = min(n, req.num_prompt_tokens)
        return n

    def _build_store_jobs(
        self, num_scheduled: dict[str, int], finished: Iterable[str]
    ) -> dict[int, TransferJob]:
        """Why long: it mirrors vLLM's OffloadingConnectorScheduler._build_store_jobs (287
        lines there) in vLLM's order: one pass over the scheduled and finished requests
        that shares the chunk and group bookkeeping."""
        bpc = self.blocks_per_chunk
        store_jobs: dict[int, TransferJob] = {}
        for rid in chain(num_scheduled, finished):
            rs = self._req_status.get(rid)
            if rs is None:
                continue
            req = rs.req
            if req.status == RequestStatus.FINISHED_ABORTED:
                num_after = req.num_computed_tokens
            elif req.is_finished():
                num_after = max(req.num_prompt_tokens, req.num_tokens - 1)
            else:
                num_after = req.num_computed_tokens + num_scheduled[rid]
            num_offloadable = self._num_offloadable_tokens(req, num_after)
            new_keys: list[OffloadKey] = []
            ranges: list[tuple[int, int]] = []
            for gc, gs in zip(self.groups, rs.group_states):
                num_chunks = rs.storable_chunks(gc, gs, num_offloadable)
                start = gs.next_stored_chunk_idx
                ranges.append((start, num_chunks))
                if num_chunks <= start:
                    continue
                bids = gs.block_ids
                for idx, key in enumerate(gs.offload_keys[start:num_chunks]):
                    first = (start + idx) * bpc
                    if any(bids[first + b] == 0 for b in range(bpc)):
                        continue
                    new_keys.append(key)
            if not new_keys:
                rs.advance_stored_idx(num_offloadable)
                continue
            store = self.manager.prepare_store(new_keys, rs.ctx)
            if store is None:  # the tier cannot make room: offered again next step
                continue
            self._current_batch_evicted.extend(store.evicted_keys)
            if not store.keys_to_store:
                rs.advance_stored_idx(num_offloadable)
                continue
            to_store = set(store.keys_to_store)
            src_block_ids: list[int] = []
            ordered_keys: list[OffloadKey] = []
            for gs, (start, num_chunks) in zip(rs.group_states, ranges):
                for idx, key in enumerate(gs.offload_keys[start:num_chunks]):
                    if key not in to_store:
                        continue
                    ordered_keys.append(key)
                    first = (start + idx) * bpc
                    src_block_ids.extend(b for b in gs.block_ids[first : first + bpc] if b != 0)
                gs.next_stored_chunk_idx = max(gs.next_stored_chunk_idx, num_chunks)
            job_id = self._new_job_id()
            rs.transfer_jobs.add(job_id)
            self._jobs[job_id] = _JobStatus(
                rid,
                self.num_workers,
                to_store,
                is_store=True,
                deferred_fence_block_ids=list(src_block_ids),
            )
            chunk_of = dict(zip(store.keys_to_store, store.chunk_ids))
            store_jobs[job_id] = TransferJob(
                rid, ordered_keys, src_block_ids, [chunk_of[k] for k in ordered_keys], True
            )
            if req.is_finished():
                for bid in src_block_ids:
                    self._block_id_to_pending_jobs.setdefault(bid, set()).add(job_id)
                    if bid in self._current_batch_allocated_block_ids:
                        self._current_batch_jobs_to_flush.add(job_id)
        return store_jobs

    # -- worker output -------------------------------------------------------------

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        """``update_connector_output``: apply the jobs the workers finished."""
        for job_id, count in connector_output.completed_jobs.items():
            assert count > 0
            js = self._jobs[job_id]
            js.pending_count -= count
            if js.pending_count > 0:
                continue
            rs = self._req_status[js.req_id]
            if js.is_store:
                self.manager.complete_store(js.keys)
            else:
                self.manager.complete_load(js.keys)
                if self._chunks_being_loaded:
                    self._chunks_being_loaded.difference_update(js.keys)
            if self._block_id_to_pending_jobs and rs.req.is_finished():
                for bid in js.deferred_fence_block_ids:
                    jobs = self._block_id_to_pending_jobs[bid]
                    jobs.remove(job_id)
                    if not jobs:
                        del self._block_id_to_pending_jobs[bid]
            del self._jobs[job_id]
            rs.transfer_jobs.remove(job_id)
            if rs.finished_signaled and not rs.transfer_jobs:
                del self._req_status[js.req_id]

    def request_finished(
        self, request: Request, block_ids: tuple[list[int], ...]
    ) -> tuple[bool, dict[str, Any] | None]:
        """``request_finished``: called before a finished request's blocks are freed.
        Returns whether freeing must wait (never: stores are fenced instead) and no
        transfer parameters. ``block_ids`` (the blocks of its computed tokens) are
        not read."""
        rs = self._req_status.get(request.request_id)
        if rs is None:
            return False, None
        rs.update_offload_keys()
        for job_id in rs.transfer_jobs:
            for bid in self._jobs[job_id].deferred_fence_block_ids:
                self._block_id_to_pending_jobs.setdefault(bid, set()).add(job_id)
        return False, None

    def has_pending_push_work(self) -> bool:
        """Transfers in flight keep the engine stepping (``has_pending_push_work``)."""
        return bool(self._jobs)

    def num_jobs_in_flight(self) -> int:
        return len(self._jobs)
