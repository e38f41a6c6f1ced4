"""Per-attention-type KV cache managers.

Mirrors ``SingleTypeKVCacheManager``, ``FullAttentionManager``,
``SlidingWindowManager`` and ``ChunkedLocalAttentionManager`` of
``vllm/v1/core/single_type_kv_cache_manager.py`` (vLLM 0.33.0), for groups whose
block size equals the hash block size (no fine-grained or EAGLE hits).

A manager keeps each request's block table for one KV cache group. Sliding-window
and chunked-local managers replace blocks that left the attention window with the
shared null block and free them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from kvcore.block_pool import BlockPool
from kvcore.kv_cache_block import BlockHash, KVCacheBlock
from kvcore.kv_cache_interface import (
    AttentionSpec,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    SlidingWindowSpec,
)
from kvcore.utils import cdiv

if TYPE_CHECKING:
    from kvcore.request import Request


def _trim_null_head(blocks: list[KVCacheBlock]) -> list[KVCacheBlock]:
    """``blocks`` without its leading null blocks (``trim_null_head``)."""
    i = 0
    n = len(blocks)
    while i < n and blocks[i].is_null:
        i += 1
    return blocks[i:] if i else blocks


class SingleTypeKVCacheManager:
    """Block tables of one KV cache group (mirrors ``SingleTypeKVCacheManager``)."""

    UNLISTED_OK: ClassVar[bool] = False
    """Whether an unshared request's cached blocks may stay out of the pool's hash map
    until its preemption (:meth:`kvcore.block_pool.BlockPool.cache_full_blocks`): only
    where a preempted request's next lookup can hit no block it freed before (full
    attention keeps every block until the request ends; a sliding window frees blocks
    as it goes, which that lookup may reach)."""

    def __init__(
        self,
        kv_cache_spec: AttentionSpec,
        block_pool: BlockPool,
        enable_caching: bool,
        kv_cache_group_id: int,
        max_admission_blocks_per_request: int | None = None,
    ) -> None:
        self.kv_cache_spec = kv_cache_spec
        self.block_size = kv_cache_spec.block_size
        self.block_pool = block_pool
        self.enable_caching = enable_caching
        self.kv_cache_group_id = kv_cache_group_id
        self.max_admission_blocks_per_request = max_admission_blocks_per_request
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # Number of leading blocks of a running request already registered in the
        # prefix cache; absent until the request is first cached or given hits.
        self.num_cached_block: dict[str, int] = {}
        self._null_block = block_pool.null_block

    def get_num_blocks_to_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock],
        total_computed_tokens: int,
        apply_admission_cap: bool = False,
    ) -> int:
        """Blocks to take from the free queue so the request has ``num_tokens`` slots.

        Counts prefix hits that currently sit in the free queue (touching them
        removes them from it), and skips blocks below the attention window.
        """
        num_required = cdiv(num_tokens, self.block_size)
        if apply_admission_cap and self.max_admission_blocks_per_request is not None:
            num_required = min(num_required, self.max_admission_blocks_per_request)
        blocks = self.req_to_blocks.get(request_id)
        num_req_blocks = len(blocks) if blocks else 0
        if request_id in self.num_cached_block:
            return max(num_required - num_req_blocks, 0)
        num_skipped_blocks = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        num_local = len(new_computed_blocks) + num_req_blocks
        num_new = max(num_required - max(num_skipped_blocks, num_local), 0)
        skip_hits = max(0, num_skipped_blocks - num_req_blocks)
        num_evictable = 0
        for blk in new_computed_blocks[skip_hits:]:
            if blk.ref_cnt == 0 and not blk.is_null:
                num_evictable += 1
        return num_new + num_evictable

    def add_local_computed_blocks(
        self,
        request_id: str,
        new_computed_blocks: Sequence[KVCacheBlock],
        num_local_computed_tokens: int,
    ) -> None:
        """Give a newly admitted request its prefix hits (touched) and null padding."""
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        assert not req_blocks, f"request {request_id} already holds blocks"
        num_skipped_blocks = (
            self.get_num_skipped_tokens(num_local_computed_tokens) // self.block_size
        )
        if num_skipped_blocks > 0:
            new_computed_blocks = new_computed_blocks[num_skipped_blocks:]
        if self.enable_caching:
            self.block_pool.touch(new_computed_blocks)
        else:
            assert not new_computed_blocks, "prefix hits with caching disabled"
        req_blocks.extend([self._null_block] * num_skipped_blocks)
        req_blocks.extend(new_computed_blocks)
        self.num_cached_block[request_id] = len(req_blocks)

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> list[KVCacheBlock]:
        """Grow the request's table to cover ``num_tokens`` tokens; return the new blocks."""
        req_blocks = self.req_to_blocks.get(request_id)
        if req_blocks is None:
            req_blocks = self.req_to_blocks[request_id] = []
        num_new = cdiv(num_tokens, self.block_size) - len(req_blocks)
        if num_new <= 0:
            return []
        new_blocks = self.block_pool.get_new_blocks(num_new)
        req_blocks.extend(new_blocks)
        return new_blocks

    def allocate_new_blocks_in_turn(self, allocs: Sequence[tuple[str, int]]) -> None:
        """:meth:`allocate_new_blocks` for each ``(request_id, num_tokens)`` in turn
        (distinct requests), the pool's blocks popped at once (the same blocks in the
        same order: a shortcut of fast-forward's, not vLLM's)."""
        bs = self.block_size
        req_to_blocks = self.req_to_blocks
        counts: list[int] = []
        for request_id, num_tokens in allocs:
            req_blocks = req_to_blocks.get(request_id)
            if req_blocks is None:
                req_blocks = req_to_blocks[request_id] = []
            counts.append(max(0, cdiv(num_tokens, bs) - len(req_blocks)))
        new_blocks = self.block_pool.get_new_blocks(sum(counts))
        at = 0
        for (request_id, _), n in zip(allocs, counts):
            if n:
                req_to_blocks[request_id].extend(new_blocks[at : at + n])
                at += n

    def reachable_block_mask(self, num_blocks: int) -> list[bool] | None:
        """Which new full blocks can ever serve a hit; None means all of them."""
        return None

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Register the request's blocks that ``num_tokens`` tokens fill completely."""
        request_id = request.request_id
        num_cached = self.num_cached_block.get(request_id, 0)
        num_full = min(num_tokens, len(request.block_hashes) * self.block_size) // self.block_size
        if num_cached >= num_full:
            return
        self.block_pool.cache_full_blocks(
            request,
            self.req_to_blocks[request_id],
            num_cached,
            num_full,
            self.block_size,
            self.kv_cache_group_id,
            self.reachable_block_mask(num_full - num_cached),
            request.unshared and self.UNLISTED_OK,
        )
        self.num_cached_block[request_id] = num_full

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        """Forget the request; return its blocks without the leading nulls."""
        blocks = self.req_to_blocks.pop(request_id, [])
        self.num_cached_block.pop(request_id, None)
        return _trim_null_head(blocks)

    def free(self, request_id: str) -> None:
        """Release the request's blocks, tail first (so the tail is evicted first)."""
        blocks = self.pop_blocks_for_free(request_id)
        blocks.reverse()
        self.block_pool.free_blocks(blocks)

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int) -> None:
        """Null out and free blocks that left the attention window."""
        num_skipped_tokens = self.get_num_skipped_tokens(processed_computed_tokens)
        if num_skipped_tokens <= 0:
            return
        blocks = self.req_to_blocks.get(request_id)
        if blocks is None:
            blocks = self.req_to_blocks[request_id] = []
        last = min(num_skipped_tokens // self.block_size, len(blocks))
        freed = []
        null = self._null_block
        for i in range(last - 1, -1, -1):
            if blocks[i] is null:
                break
            freed.append(blocks[i])
            blocks[i] = null
        if freed:
            self.block_pool.free_blocks(freed)

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Leading tokens outside the attention window of the next token."""
        return 0

    @classmethod
    def find_longest_cache_hit(
        cls,
        block_hashes: Sequence[BlockHash],
        max_length: int,
        kv_cache_group_ids: Sequence[int],
        block_pool: BlockPool,
        kv_cache_spec: AttentionSpec,
        alignment_tokens: int,
    ) -> tuple[list[list[KVCacheBlock]], int]:
        """Longest cached prefix of at most ``max_length`` tokens, for all given groups.

        Returns one block list per group (skipped blocks as null blocks) and the hit
        length in tokens.
        """
        raise NotImplementedError


class FullAttentionManager(SingleTypeKVCacheManager):
    """Mirrors ``FullAttentionManager``.

    Full attention: every block is kept until the request finishes."""

    UNLISTED_OK: ClassVar[bool] = True

    @classmethod
    def find_longest_cache_hit(
        cls,
        block_hashes,
        max_length,
        kv_cache_group_ids,
        block_pool,
        kv_cache_spec,
        alignment_tokens,
    ):
        block_size = kv_cache_spec.block_size
        computed: list[list[KVCacheBlock]] = [[] for _ in kv_cache_group_ids]
        get = block_pool.get_cached_block
        for block_hash in block_hashes[: max_length // block_size]:
            cached = get(block_hash, kv_cache_group_ids)
            if not cached:
                break  # chained hashes: nothing after a miss can hit
            for lst, blk in zip(computed, cached):
                lst.append(blk)
        hit_length = len(computed[0]) * block_size
        hit_length -= hit_length % alignment_tokens
        num_blocks = cdiv(hit_length, block_size)
        for lst in computed:
            del lst[num_blocks:]
        return computed, hit_length


class SlidingWindowManager(SingleTypeKVCacheManager):
    """Mirrors ``SlidingWindowManager``.

    Sliding-window attention of ``sliding_window`` tokens."""

    def __init__(
        self,
        kv_cache_spec: SlidingWindowSpec,
        block_pool: BlockPool,
        enable_caching: bool,
        kv_cache_group_id: int,
        max_admission_blocks_per_request: int | None = None,
    ) -> None:
        super().__init__(
            kv_cache_spec,
            block_pool,
            enable_caching,
            kv_cache_group_id,
            max_admission_blocks_per_request,
        )
        self.sliding_window = kv_cache_spec.sliding_window
        self.extra_retained_tokens = kv_cache_spec.extra_retained_tokens

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return max(0, num_computed_tokens - self.sliding_window + 1 - self.extra_retained_tokens)

    def reachable_block_mask(self, num_blocks: int) -> list[bool] | None:
        # With one block size everywhere a hit may end at any block, so every block
        # of a window-long run is reachable, unless a hit needs no block at all.
        if cdiv(self.sliding_window - 1, self.block_size) >= 1:
            return None
        return [False] * num_blocks

    @classmethod
    def find_longest_cache_hit(
        cls,
        block_hashes,
        max_length,
        kv_cache_group_ids,
        block_pool,
        kv_cache_spec,
        alignment_tokens,
    ):
        block_size = kv_cache_spec.block_size
        need = cdiv(kv_cache_spec.sliding_window - 1, block_size)
        max_num_blocks = max_length // block_size
        null = block_pool.null_block
        computed = [[null] * max_num_blocks for _ in kv_cache_group_ids]
        run = 0
        found = False
        get = block_pool.get_cached_block
        for i in range(max_num_blocks - 1, -1, -1):
            cached = get(block_hashes[i], kv_cache_group_ids)
            if cached:
                if (
                    run == 0
                    and block_size != alignment_tokens
                    and ((i + 1) * block_size) % alignment_tokens != 0
                ):
                    continue
                for lst, blk in zip(computed, cached):
                    lst[i] = blk
                run += 1
                if run >= need:
                    for lst in computed:
                        del lst[i + run :]
                    found = True
                    break
            else:
                run = 0
        if not found:
            # The run that reaches block 0 is a hit even if shorter than the window.
            for lst in computed:
                del lst[run:]
            while (
                block_size != alignment_tokens
                and len(computed[0]) * block_size % alignment_tokens != 0
            ):
                for lst in computed:
                    lst.pop()
        return computed, len(computed[0]) * block_size


class ChunkedLocalAttentionManager(SingleTypeKVCacheManager):
    """Mirrors ``ChunkedLocalAttentionManager``.

    Chunked local attention: tokens attend within chunks of ``attention_chunk_size``."""

    def __init__(
        self,
        kv_cache_spec: ChunkedLocalAttentionSpec,
        block_pool: BlockPool,
        enable_caching: bool,
        kv_cache_group_id: int,
        max_admission_blocks_per_request: int | None = None,
    ) -> None:
        super().__init__(
            kv_cache_spec,
            block_pool,
            enable_caching,
            kv_cache_group_id,
            max_admission_blocks_per_request,
        )
        self.attention_chunk_size = kv_cache_spec.attention_chunk_size

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return (num_computed_tokens // self.attention_chunk_size) * self.attention_chunk_size

    @classmethod
    def find_longest_cache_hit(
        cls,
        block_hashes,
        max_length,
        kv_cache_group_ids,
        block_pool,
        kv_cache_spec,
        alignment_tokens,
    ):
        block_size = kv_cache_spec.block_size
        chunk = kv_cache_spec.attention_chunk_size
        max_num_blocks = max_length // block_size
        start = (max_length // chunk) * chunk if max_length > 0 else 0
        start_block = start // block_size
        null = block_pool.null_block
        computed = [[null] * start_block for _ in kv_cache_group_ids]
        get = block_pool.get_cached_block
        for i in range(start_block, max_num_blocks):
            cached = get(block_hashes[i], kv_cache_group_ids)
            if not cached:
                break
            for lst, blk in zip(computed, cached):
                lst.append(blk)
        return computed, len(computed[0]) * block_size


def get_manager_class(spec: AttentionSpec) -> type[SingleTypeKVCacheManager]:
    """The manager class for a spec (``KVCacheSpecRegistry.get_manager_class``)."""
    if isinstance(spec, SlidingWindowSpec):
        return SlidingWindowManager
    if isinstance(spec, ChunkedLocalAttentionSpec):
        return ChunkedLocalAttentionManager
    if isinstance(spec, FullAttentionSpec):
        return FullAttentionManager
    raise ValueError(f"no KV cache manager for spec {type(spec).__name__}")
