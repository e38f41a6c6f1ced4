"""The CPU KV offload tier's bookkeeping (scheduler side): capacity, lookups, loads,
stores and LRU eviction.

Mirrors ``CPUOffloadingManager`` (``vllm/v1/kv_offload/cpu/manager.py``) with its
default ``LRUCachePolicy`` (``vllm/v1/kv_offload/cpu/policies/lru.py``), and the
capacity rule of ``CPUOffloadingSpec.__init__`` (``vllm/v1/kv_offload/cpu/spec.py``)
of vLLM 0.33.0. The tier holds *chunks*: ``blocks_per_chunk`` consecutive GPU blocks
of one KV cache group, named by an offload key (the hash of the chunk's last block
followed by the 4-byte group id, vLLM's ``make_offload_key``). No bytes move here;
the worker side does the copies and reports when they are done.

A chunk's life: ``prepare_store`` allocates it (write pending, not readable, not
evictable); ``complete_store`` makes it ready (readable, evictable); ``prepare_load``
pins it (a reader: not evictable) until ``complete_load``. When a store needs room,
the least recently used evictable chunks go first; if not enough of them can go,
the whole store is refused (``None``).

LRU order (vLLM's ``LRUCachePolicy``): every chunk has a rank, a pair of ints, and
eviction takes the smallest ``(rank, key)`` first. A chunk stored or read by a request
gets ``(request_rank, -end_token)``: one rank per request, taken the first time the
request needs one, so that within a request the tail is evicted before the head. When
the request finishes, its chunks in head-to-tail order get fresh ranks
``(counter, 0)`` from the tail backwards, so the head ends up the most recently used.

Left out (vLLM options kvsim does not model): the ARC policy, ``store_threshold`` >= 2
(admission after repeated offers), KV events, metrics, and ``reset_cache``.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from kvcore.kv_cache_block import BlockHash, block_hash_with_group_id

OffloadKey = bytes
"""A chunk's name: its last block's hash followed by the 4-byte big-endian group id
(vLLM's ``OffloadKey``, made by ``make_offload_key``)."""

PAGE_SIZE_BYTES = 4096
"""Alignment of one CPU chunk in bytes (vLLM's ``SharedOffloadRegion``
``BLOCK_SIZE_ALIGNMENT`` = ``mmap.PAGESIZE``, 4 KiB on x86-64 Linux)."""


def make_offload_key(block_hash: BlockHash, group_idx: int) -> OffloadKey:
    """Mirrors ``make_offload_key``: hash bytes, then the group index (4 bytes)."""
    return block_hash_with_group_id(block_hash, group_idx)


def round_up(x: int, multiple: int) -> int:
    """``x`` rounded up to a multiple of ``multiple`` (``vllm.utils.math_utils``)."""
    return -(x // -multiple) * multiple


def cpu_offload_num_chunks(
    cpu_bytes_to_use: int,
    worker_kv_bytes_per_block: int,
    blocks_per_chunk: int = 1,
    world_size: int = 1,
    alignment_bytes: int = PAGE_SIZE_BYTES,
) -> int:
    """Chunks the CPU tier holds (mirrors ``CPUOffloadingSpec.__init__``).

    ``cpu_bytes_to_use``: the tier's size in bytes, summed over all workers (vLLM's
    ``--kv-offloading-size`` GiB times 2**30). ``worker_kv_bytes_per_block``: KV bytes
    of one GPU block on one worker, across all offloaded layers (vLLM:
    ``kv_cache_tensors[0].size // num_blocks``, or the groups' page sizes times their
    layer counts). A chunk holds ``blocks_per_chunk`` blocks of every worker, padded to
    ``alignment_bytes``. Returns 0 when the per-block size is unknown (0).
    """
    if worker_kv_bytes_per_block <= 0 or world_size <= 0:
        return 0
    chunk_bytes = worker_kv_bytes_per_block * world_size * blocks_per_chunk
    return int(cpu_bytes_to_use) // round_up(chunk_bytes, alignment_bytes)


class LookupResult(enum.Enum):
    """Mirrors ``vllm.v1.kv_offload.base.LookupResult`` (the CPU tier never answers
    ``RETRY``)."""

    MISS = enum.auto()
    HIT = enum.auto()
    HIT_PENDING = enum.auto()
    RETRY = enum.auto()


class OffloadReqContext:
    """Mirrors the parts of ``ReqContext`` (``vllm/v1/kv_offload/base.py``) the CPU tier
    reads: each key's end-token position, and the per-request state the manager
    (``_RequestCacheAccess``) and the LRU policy (``_RequestRank``) keep there."""

    __slots__ = ("req_id", "positions", "key_groups", "seen_keys", "lru_rank", "finished")

    def __init__(self, req_id: str) -> None:
        self.req_id = req_id
        self.positions: dict[OffloadKey, int] = {}
        """Key -> end token (exclusive) of its chunk in this request."""
        self.key_groups: dict[int, list[OffloadKey]] = {}
        """Group index -> keys this request touched, in first-touch order."""
        self.seen_keys: set[OffloadKey] = set()
        self.lru_rank: int | None = None
        self.finished = False

    def set_offload_key_position(self, key: OffloadKey, end_token: int) -> None:
        self.positions[key] = end_token


def _group_idx(key: OffloadKey) -> int:
    return int.from_bytes(key[-4:], "big")


class ChunkStatus:
    """Mirrors ``ChunkStatus`` (``cpu/policies/base.py``): ``ref_cnt`` -1 while its
    store is in flight (not readable), else the number of loads reading it."""

    __slots__ = ("chunk_id", "ref_cnt")

    def __init__(self, chunk_id: int) -> None:
        self.chunk_id = chunk_id
        self.ref_cnt = -1

    @property
    def is_ready(self) -> bool:
        return self.ref_cnt >= 0


class LRUCachePolicy:
    """Mirrors ``LRUCachePolicy`` (``vllm/v1/kv_offload/cpu/policies/lru.py``).

    vLLM keeps evictable chunks in a lazily invalidated heap ordered by ``(rank,
    key)``; taking the ``n`` smallest evictable unprotected ``(rank, key)`` pairs, as
    here, selects the same chunks."""

    def __init__(self, cache_capacity: int) -> None:
        self.cache_capacity = cache_capacity
        self.chunks: dict[OffloadKey, ChunkStatus] = {}
        self.ranks: dict[OffloadKey, tuple[int, int]] = {}
        self.evictable: set[OffloadKey] = set()
        self.next_rank = 0

    def _request_rank(self, ctx: OffloadReqContext) -> int:
        if ctx.lru_rank is None:
            self.next_rank += 1
            ctx.lru_rank = self.next_rank
        return ctx.lru_rank

    def _update_recency(self, keys: Iterable[OffloadKey]) -> None:
        for key in keys:
            if key in self.chunks:
                self.next_rank += 1
                self.ranks[key] = (self.next_rank, 0)

    def get(self, key: OffloadKey) -> ChunkStatus | None:
        return self.chunks.get(key)

    def insert(self, key: OffloadKey, chunk: ChunkStatus, ctx: OffloadReqContext) -> None:
        self.chunks[key] = chunk
        position = ctx.positions.get(key)
        if position is None:
            self.next_rank += 1
            self.ranks[key] = (self.next_rank, 0)
        else:
            self.ranks[key] = (self._request_rank(ctx), -position)
        if chunk.ref_cnt == 0:
            self.evictable.add(key)

    def remove(self, key: OffloadKey) -> None:
        del self.chunks[key]
        self.ranks.pop(key, None)
        self.evictable.discard(key)

    def touch(self, keys: Sequence[OffloadKey]) -> None:
        self._update_recency(reversed(list(keys)))

    def on_request_access(self, keys: Iterable[OffloadKey], ctx: OffloadReqContext) -> None:
        request_rank = self._request_rank(ctx)
        for key in keys:
            position = ctx.positions.get(key)
            if position is None or key not in self.chunks:
                continue
            rank = (request_rank, -position)
            if self.ranks[key] < rank:
                self.ranks[key] = rank

    def on_request_finished(self, ordered_keys: Sequence[OffloadKey]) -> None:
        """``ordered_keys``: the request's keys head to tail (``order_request_keys``)."""
        self._update_recency(reversed(ordered_keys))

    def evict(
        self, n: int, protected: Collection[OffloadKey]
    ) -> list[tuple[OffloadKey, ChunkStatus]] | None:
        """Remove exactly ``n`` evictable chunks not in ``protected``, least recently
        used first; None (and no change) when fewer can go."""
        if n == 0:
            return []
        candidates = sorted((self.ranks[k], k) for k in self.evictable if k not in protected)
        if len(candidates) < n:
            return None
        out: list[tuple[OffloadKey, ChunkStatus]] = []
        for _, key in candidates[:n]:
            chunk = self.chunks.pop(key)
            assert chunk.ref_cnt == 0
            self.evictable.remove(key)
            del self.ranks[key]
            out.append((key, chunk))
        return out

    def mark_evictable(self, key: OffloadKey) -> None:
        self.evictable.add(key)

    def mark_non_evictable(self, key: OffloadKey) -> None:
        self.evictable.remove(key)


@dataclass(slots=True)
class PrepareStoreOutput:
    """Mirrors ``PrepareStoreOutput``: the keys to write (with their CPU chunk ids)
    and the keys evicted to make room, least recently used first."""

    keys_to_store: list[OffloadKey]
    chunk_ids: list[int]
    evicted_keys: list[OffloadKey] = field(default_factory=list)


class CPUOffloadingManager:
    """Mirrors ``CPUOffloadingManager`` (``vllm/v1/kv_offload/cpu/manager.py``) with the
    LRU policy and ``store_threshold`` < 2 (every offered chunk may be stored).

    ``num_chunks``: capacity in chunks (:func:`cpu_offload_num_chunks`). Chunk ids are
    handed out fresh (0, 1, ...) until the capacity is reached, then reused from the
    freed list, last freed first."""

    def __init__(self, num_chunks: int) -> None:
        self.num_chunks = num_chunks
        self.num_allocated_chunks = 0
        self.free_list: list[int] = []
        self.policy = LRUCachePolicy(num_chunks)
        self.num_evictable_chunks = 0
        """Ready chunks no load is reading (ref_cnt 0)."""
        self.num_write_pending_chunks = 0
        """Chunks whose store is in flight."""

    # -- chunk pool ----------------------------------------------------------------

    def num_free_chunks(self) -> int:
        return len(self.free_list) + self.num_chunks - self.num_allocated_chunks

    def _allocate_chunks(self, n: int) -> list[ChunkStatus]:
        num_fresh = min(n, self.num_chunks - self.num_allocated_chunks)
        assert len(self.free_list) >= n - num_fresh
        chunks = []
        for _ in range(num_fresh):
            chunks.append(ChunkStatus(self.num_allocated_chunks))
            self.num_allocated_chunks += 1
        for _ in range(n - num_fresh):
            chunks.append(ChunkStatus(self.free_list.pop()))
        return chunks

    def _record_access(self, keys: Iterable[OffloadKey], ctx: OffloadReqContext) -> None:
        """``_record_request_cache_access``: remember first touches in group order and
        let the policy rank them."""
        new_keys = []
        for key in keys:
            if key in ctx.seen_keys:
                continue
            ctx.key_groups.setdefault(_group_idx(key), []).append(key)
            ctx.seen_keys.add(key)
            new_keys.append(key)
        if new_keys:
            self.policy.on_request_access(new_keys, ctx)

    # -- OffloadingManager interface -----------------------------------------------

    def on_new_request(self, ctx: OffloadReqContext) -> None:
        """``on_new_request`` (the CPU tier offloads chunk by chunk)."""

    def lookup(self, key: OffloadKey) -> LookupResult:
        chunk = self.policy.get(key)
        if chunk is None:
            return LookupResult.MISS
        return LookupResult.HIT if chunk.is_ready else LookupResult.HIT_PENDING

    def prepare_load(self, keys: Sequence[OffloadKey], ctx: OffloadReqContext) -> list[int]:
        """Pin ready chunks for reading; returns their CPU chunk ids."""
        chunk_ids = []
        for key in keys:
            chunk = self.policy.get(key)
            assert chunk is not None and chunk.is_ready, f"chunk {key.hex()} not loadable"
            if chunk.ref_cnt == 0:
                self.policy.mark_non_evictable(key)
                self.num_evictable_chunks -= 1
            chunk.ref_cnt += 1
            chunk_ids.append(chunk.chunk_id)
        self._record_access(keys, ctx)
        return chunk_ids

    def touch(self, keys: Sequence[OffloadKey]) -> None:
        self.policy.touch(keys)

    def complete_load(self, keys: Iterable[OffloadKey]) -> None:
        for key in keys:
            chunk = self.policy.get(key)
            assert chunk is not None and chunk.ref_cnt > 0
            chunk.ref_cnt -= 1
            if chunk.ref_cnt == 0:
                self.num_evictable_chunks += 1
                self.policy.mark_evictable(key)

    def prepare_store(
        self, keys: Sequence[OffloadKey], ctx: OffloadReqContext
    ) -> PrepareStoreOutput | None:
        """Allocate chunks for the keys not held yet, evicting if needed; None when
        not enough chunks can be evicted (nothing changes then, except that the
        request's access to its chunks already held is recorded)."""
        keys = list(keys)
        keys_to_store: list[OffloadKey] = []
        ready_existing: set[OffloadKey] = set()
        for key in keys:
            chunk = self.policy.get(key)
            if chunk is None:
                keys_to_store.append(key)
            elif chunk.is_ready:
                ready_existing.add(key)
        recorded = set(keys_to_store) | ready_existing
        self._record_access([k for k in keys if k in recorded], ctx)
        if not keys_to_store:
            return PrepareStoreOutput([], [])
        num_to_evict = len(keys_to_store) - self.num_free_chunks()
        evicted_keys: list[OffloadKey] = []
        if num_to_evict > 0:
            if num_to_evict > self.num_evictable_chunks:
                return None
            evicted = self.policy.evict(num_to_evict, set(keys))
            if evicted is None:
                return None
            self.num_evictable_chunks -= len(evicted)
            for key, chunk in evicted:
                self.free_list.append(chunk.chunk_id)
                evicted_keys.append(key)
        chunks = self._allocate_chunks(len(keys_to_store))
        for key, chunk in zip(keys_to_store, chunks):
            self.policy.insert(key, chunk, ctx)
        self.num_write_pending_chunks += len(keys_to_store)
        return PrepareStoreOutput(keys_to_store, [c.chunk_id for c in chunks], evicted_keys)

    def complete_store(self, keys: Iterable[OffloadKey], success: bool = True) -> None:
        for key in keys:
            chunk = self.policy.get(key)
            if chunk is None or chunk.is_ready:
                continue
            self.num_write_pending_chunks -= 1
            if success:
                chunk.ref_cnt = 0
                self.num_evictable_chunks += 1
                self.policy.mark_evictable(key)
            else:
                self.policy.remove(key)
                self.free_list.append(chunk.chunk_id)

    def on_request_finished(self, ctx: OffloadReqContext) -> None:
        """Commit the request's recency: its chunks head to tail (by position when
        every key has one, else group by group in first-touch order)."""
        if ctx.finished:
            return
        ctx.finished = True
        keys = [k for g in sorted(ctx.key_groups) for k in ctx.key_groups[g]]
        positions = ctx.positions
        if all(k in positions for k in keys):
            keys.sort(key=positions.__getitem__)
        self.policy.on_request_finished(keys)

    # -- state ---------------------------------------------------------------------

    def num_stored_chunks(self) -> int:
        """Chunks held (ready or being written)."""
        return len(self.policy.chunks)

    def usage(self) -> float:
        """Fraction of chunks pinned (being written or read), as vLLM's
        ``kv_offload_cpu_cache_usage_perc``."""
        used = self.num_allocated_chunks - len(self.free_list) - self.num_evictable_chunks
        return used / self.num_chunks if self.num_chunks > 0 else 0.0
