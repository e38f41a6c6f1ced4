"""Coordinators: choice by config, hybrid fixed-point hits, per-group free order."""

import pytest

from kvcore.block_hashing import BlockHasher
from kvcore.kv_cache_coordinator import (
    HybridKVCacheCoordinator,
    KVCacheCoordinatorNoPrefixCache,
    UnitaryKVCacheCoordinator,
    get_kv_cache_coordinator,
)
from kvcore.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from kvcore.request import Request

BS = 4


def config(*specs, num_blocks=64):
    return KVCacheConfig(
        num_blocks, [], [KVCacheGroupSpec([f"l{i}"], s) for i, s in enumerate(specs)]
    )


FULL = FullAttentionSpec(block_size=BS)
SWA = SlidingWindowSpec(block_size=BS, sliding_window=8)


def coordinator(*specs, caching=True):
    return get_kv_cache_coordinator(config(*specs), 1024, 64, caching, False)


def test_coordinator_choice():
    assert isinstance(coordinator(FULL), UnitaryKVCacheCoordinator)
    assert isinstance(coordinator(FULL, SWA), HybridKVCacheCoordinator)
    assert isinstance(coordinator(FULL, SWA, caching=False), KVCacheCoordinatorNoPrefixCache)


def test_groups_must_share_block_size():
    with pytest.raises(ValueError, match="block size"):
        coordinator(FULL, SlidingWindowSpec(block_size=8, sliding_window=8))


def fill(c, tokens, rid="w"):
    r = Request(rid, tokens, 1, block_hasher=BlockHasher.from_name(BS, "sha256"))
    c.allocate_new_blocks(rid, len(tokens))
    c.cache_blocks(r, len(tokens))
    return r


def test_hybrid_hit_is_common_to_all_types():
    c = coordinator(FULL, SWA)
    r = fill(c, list(range(24)))
    blocks, hit = c.find_longest_cache_hit(r.block_hashes, 23)
    assert hit == 20
    full, swa = blocks
    assert len(full) == 5 and len(swa) == 5
    # Evict the SWA group's blocks at index 3 and 4: the SWA run now ends at index 2.
    swa_table = c.single_type_managers[1].req_to_blocks["w"]
    for i in (3, 4):
        c.block_pool._evict_cached_block(swa_table[i])
    blocks, hit = c.find_longest_cache_hit(r.block_hashes, 23)
    assert hit == 12  # SWA shrinks the hit; full attention is trimmed to match
    assert len(blocks[0]) == 3 and len(blocks[1]) == 3


def test_equal_specs_are_looked_up_together_full_first():
    c = coordinator(SWA, FULL, SWA)
    specs = [spec for spec, _, _ in c.attention_groups]
    assert specs == [FULL, SWA]
    assert c.attention_groups[1][1] == [0, 2]


def test_chunked_local_hybrid():
    c = coordinator(FULL, ChunkedLocalAttentionSpec(block_size=BS, attention_chunk_size=8))
    r = fill(c, list(range(16)))
    blocks, hit = c.find_longest_cache_hit(r.block_hashes, 15)
    assert hit == 12 and [b.is_null for b in blocks[1]] == [True, True, False]


def test_free_releases_group_zero_first():
    c = coordinator(FULL, SWA)
    c.allocate_new_blocks("r", 8)  # group 0: blocks 1,2; group 1: blocks 3,4
    c.free("r")
    queue = [b.block_id for b in c.block_pool.free_block_queue.get_all_free_blocks()]
    assert queue[:4] == [4, 3, 2, 1]  # group 1's blocks end up ahead of group 0's
