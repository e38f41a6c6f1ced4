"""Coordinators: one per KV cache manager, spanning all KV cache groups.

Mirrors ``KVCacheCoordinatorNoPrefixCache``, ``UnitaryKVCacheCoordinator`` and
``HybridKVCacheCoordinator`` of ``vllm/v1/core/kv_cache_coordinator.py`` (vLLM
0.33.0) for groups sharing one block size. All groups draw from one ``BlockPool``
(one block id space).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from kvcore.block_pool import BlockPool
from kvcore.kv_cache_block import BlockHash, KVCacheBlock
from kvcore.kv_cache_interface import (
    AttentionSpec,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    SlidingWindowSpec,
)
from kvcore.single_type_kv_cache_manager import SingleTypeKVCacheManager, get_manager_class
from kvcore.utils import cdiv

if TYPE_CHECKING:
    from kvcore.request import Request


class KVCacheCoordinator:
    """Mirrors ``KVCacheCoordinator`` (vLLM 0.33.0).

    Fans allocation, caching and freeing out to one manager per group, in order."""

    def __init__(
        self,
        kv_cache_config: KVCacheConfig,
        max_model_len: int,
        max_in_flight_tokens: int,
        enable_caching: bool,
        enable_kv_cache_events: bool,
    ) -> None:
        groups = kv_cache_config.kv_cache_groups
        block_sizes = {g.kv_cache_spec.block_size for g in groups}
        if len(block_sizes) > 1:
            raise ValueError(f"all KV cache groups must share one block size, got {block_sizes}")
        self.kv_cache_config = kv_cache_config
        self.block_size = block_sizes.pop() if block_sizes else 0
        self.block_pool = BlockPool(
            kv_cache_config.num_blocks, enable_caching, enable_kv_cache_events
        )
        managers = []
        for i, group in enumerate(groups):
            spec = group.kv_cache_spec
            cap = None
            if isinstance(spec, (SlidingWindowSpec, ChunkedLocalAttentionSpec)):
                cap = spec.max_admission_blocks_per_request(max_in_flight_tokens, max_model_len)
            attn = cast(AttentionSpec, spec)  # every group of these models is attention
            managers.append(
                get_manager_class(attn)(
                    attn, self.block_pool, enable_caching, i, max_admission_blocks_per_request=cap
                )
            )
        self.single_type_managers: tuple[SingleTypeKVCacheManager, ...] = tuple(managers)

    def get_num_blocks_to_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: Sequence[Sequence[KVCacheBlock]],
        total_computed_tokens: int,
        apply_admission_cap: bool = False,
    ) -> int:
        """Blocks needed over all groups (see the per-group method)."""
        return sum(
            m.get_num_blocks_to_allocate(
                request_id,
                num_tokens,
                new_computed_blocks[i],
                total_computed_tokens,
                apply_admission_cap,
            )
            for i, m in enumerate(self.single_type_managers)
        )

    def allocate_new_computed_blocks(
        self,
        request_id: str,
        new_computed_blocks: Sequence[Sequence[KVCacheBlock]],
        num_local_computed_tokens: int,
    ) -> None:
        """Hand prefix hits to a newly admitted request (touch all groups first)."""
        if any(request_id in m.num_cached_block for m in self.single_type_managers):
            return
        for i, m in enumerate(self.single_type_managers):
            m.add_local_computed_blocks(
                request_id, new_computed_blocks[i], num_local_computed_tokens
            )

    def allocate_new_blocks(
        self, request_id: str, num_tokens: int
    ) -> tuple[list[KVCacheBlock], ...]:
        return tuple(
            m.allocate_new_blocks(request_id, num_tokens) for m in self.single_type_managers
        )

    def get_num_cacheable_tokens(self, num_computed_tokens: int) -> int:
        return num_computed_tokens

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        n = self.get_num_cacheable_tokens(num_computed_tokens)
        for m in self.single_type_managers:
            if m.enable_caching:
                m.cache_blocks(request, n)

    def free(self, request_id: str) -> None:
        """Free every group's blocks, group 0 first."""
        for m in self.single_type_managers:
            m.free(request_id)

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        """Mirrors ``KVCacheCoordinator.pop_blocks_for_free``: forget the request in
        every group and return its blocks (group 0's first, each in table order)
        without freeing them."""
        blocks: list[KVCacheBlock] = []
        for m in self.single_type_managers:
            blocks.extend(m.pop_blocks_for_free(request_id))
        return blocks

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int) -> None:
        for m in self.single_type_managers:
            m.remove_skipped_blocks(request_id, processed_computed_tokens)

    def get_blocks(self, request_id: str) -> tuple[list[KVCacheBlock], ...]:
        return tuple(m.req_to_blocks.get(request_id) or [] for m in self.single_type_managers)

    def reset_prefix_cache(self) -> bool:
        return self.block_pool.reset_prefix_cache()

    def find_longest_cache_hit(
        self, block_hashes: Sequence[BlockHash], max_cache_hit_length: int
    ) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        raise NotImplementedError


class KVCacheCoordinatorNoPrefixCache(KVCacheCoordinator):
    """Mirrors ``KVCacheCoordinatorNoPrefixCache``.

    Prefix caching off: lookups always miss, nothing is cached."""

    def __init__(
        self,
        kv_cache_config: KVCacheConfig,
        max_model_len: int,
        max_in_flight_tokens: int,
        enable_kv_cache_events: bool,
    ) -> None:
        super().__init__(
            kv_cache_config, max_model_len, max_in_flight_tokens, False, enable_kv_cache_events
        )

    def find_longest_cache_hit(self, block_hashes, max_cache_hit_length):
        return tuple([] for _ in self.single_type_managers), 0


class UnitaryKVCacheCoordinator(KVCacheCoordinator):
    """Mirrors ``UnitaryKVCacheCoordinator``.

    Exactly one KV cache group."""

    def find_longest_cache_hit(self, block_hashes, max_cache_hit_length):
        m = self.single_type_managers[0]
        blocks, hit = m.find_longest_cache_hit(
            block_hashes,
            max_cache_hit_length,
            [0],
            self.block_pool,
            m.kv_cache_spec,
            self.block_size,
        )
        return tuple(blocks), hit


class HybridKVCacheCoordinator(KVCacheCoordinator):
    """Mirrors ``HybridKVCacheCoordinator``.

    Several groups: a hit must hold for every attention type (fixed-point search).

    Groups with equal specs are looked up together; full-attention specs go first.
    """

    def __init__(
        self,
        kv_cache_config: KVCacheConfig,
        max_model_len: int,
        max_in_flight_tokens: int,
        enable_caching: bool,
        enable_kv_cache_events: bool,
    ) -> None:
        super().__init__(
            kv_cache_config,
            max_model_len,
            max_in_flight_tokens,
            enable_caching,
            enable_kv_cache_events,
        )
        self.attention_groups: list[tuple[object, list[int], type]] = []
        for i, g in enumerate(self.kv_cache_config.kv_cache_groups):
            cls = type(self.single_type_managers[i])
            for spec, ids, mcls in self.attention_groups:
                if spec == g.kv_cache_spec and mcls is cls:
                    ids.append(i)
                    break
            else:
                self.attention_groups.append((g.kv_cache_spec, [i], cls))
        self.attention_groups.sort(key=lambda t: not isinstance(t[0], FullAttentionSpec))
        self.is_simple_hybrid = len(self.attention_groups) == 2 and isinstance(
            self.attention_groups[0][0], FullAttentionSpec
        )

    def find_longest_cache_hit(self, block_hashes, max_cache_hit_length):
        num_groups = len(self.single_type_managers)
        hit_length = max_cache_hit_length
        hit_blocks: list[list[KVCacheBlock] | None] = [None] * num_groups
        hit_lengths = [0] * num_groups
        while True:
            curr = hit_length
            for spec, ids, mcls in self.attention_groups:
                first = ids[0]
                if isinstance(spec, FullAttentionSpec) and hit_blocks[first] is not None:
                    # Full-attention hits are prefix-closed: shrinking needs no rescan.
                    curr = min(curr, hit_lengths[first])
                    continue
                blocks, new_len = mcls.find_longest_cache_hit(
                    block_hashes, curr, ids, self.block_pool, spec, self.block_size
                )
                curr = new_len
                for gid, blks in zip(ids, blocks):
                    hit_blocks[gid] = blks
                    hit_lengths[gid] = new_len
            if curr >= hit_length:
                break
            hit_length = curr
            if self.is_simple_hybrid:
                break
        for spec, ids, _ in self.attention_groups:
            if not isinstance(spec, FullAttentionSpec):
                continue
            n = cdiv(hit_length, self.block_size)
            for gid in ids:
                if hit_blocks[gid] is not None:
                    del hit_blocks[gid][n:]
        return tuple(b if b is not None else [] for b in hit_blocks), hit_length


def get_kv_cache_coordinator(
    kv_cache_config: KVCacheConfig,
    max_model_len: int,
    max_in_flight_tokens: int,
    enable_caching: bool,
    enable_kv_cache_events: bool,
) -> KVCacheCoordinator:
    """Pick the coordinator as vLLM does: caching off, one group, or several groups."""
    if not enable_caching:
        return KVCacheCoordinatorNoPrefixCache(
            kv_cache_config, max_model_len, max_in_flight_tokens, enable_kv_cache_events
        )
    cls = (
        UnitaryKVCacheCoordinator
        if len(kv_cache_config.kv_cache_groups) == 1
        else HybridKVCacheCoordinator
    )
    return cls(kv_cache_config, max_model_len, max_in_flight_tokens, True, enable_kv_cache_events)
