"""Per-type managers: hits, skipped blocks, allocation counts."""

from kvcore.block_hashing import BlockHasher
from kvcore.block_pool import BlockPool
from kvcore.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    SlidingWindowSpec,
)
from kvcore.request import Request
from kvcore.single_type_kv_cache_manager import (
    ChunkedLocalAttentionManager,
    FullAttentionManager,
    SlidingWindowManager,
    get_manager_class,
)

BS = 4


def cached_request(pool, manager, tokens, rid="w"):
    r = Request(rid, tokens, 1, block_hasher=BlockHasher.from_name(BS, "sha256"))
    manager.allocate_new_blocks(rid, len(tokens))
    manager.cache_blocks(r, len(tokens))
    return r


def ids(blocks):
    return [b.block_id for b in blocks]


def test_manager_class_per_spec():
    assert get_manager_class(FullAttentionSpec(block_size=4)) is FullAttentionManager
    assert (
        get_manager_class(SlidingWindowSpec(block_size=4, sliding_window=8)) is SlidingWindowManager
    )
    assert (
        get_manager_class(ChunkedLocalAttentionSpec(block_size=4, attention_chunk_size=8))
        is ChunkedLocalAttentionManager
    )


def test_full_attention_hit_stops_at_first_miss_and_respects_max_length():
    pool = BlockPool(16, True)
    spec = FullAttentionSpec(block_size=BS)
    m = FullAttentionManager(spec, pool, True, 0)
    r = cached_request(pool, m, list(range(16)))
    blocks, hit = FullAttentionManager.find_longest_cache_hit(
        r.block_hashes, 15, [0], pool, spec, BS
    )
    assert hit == 12 and ids(blocks[0]) == [1, 2, 3]
    other = Request(
        "o", [99] + list(range(1, 16)), 1, block_hasher=BlockHasher.from_name(BS, "sha256")
    )
    assert (
        FullAttentionManager.find_longest_cache_hit(other.block_hashes, 15, [0], pool, spec, BS)[1]
        == 0
    )


def test_sliding_window_hit_needs_a_window_of_contiguous_blocks():
    pool = BlockPool(16, True)
    spec = SlidingWindowSpec(block_size=BS, sliding_window=8)  # needs cdiv(7,4)=2 blocks
    m = SlidingWindowManager(spec, pool, True, 0)
    r = cached_request(pool, m, list(range(24)))  # blocks 1..6 cached
    # Evict block 5 (index 4) from the cache: the right-most run is then [5, 6] -> 24 tokens
    pool._evict_cached_block(m.req_to_blocks["w"][4])
    blocks, hit = SlidingWindowManager.find_longest_cache_hit(
        r.block_hashes, 23, [0], pool, spec, BS
    )
    # max 23 tokens -> 5 blocks considered; index 4 misses, run [2,3] (ids 3,4) qualifies
    assert hit == 16
    assert [b.is_null for b in blocks[0]] == [True, True, False, False]
    assert ids(blocks[0][2:]) == [3, 4]


def test_sliding_window_removes_skipped_blocks_backwards():
    pool = BlockPool(16, True)
    spec = SlidingWindowSpec(block_size=BS, sliding_window=8)
    m = SlidingWindowManager(spec, pool, True, 0)
    m.allocate_new_blocks("r", 20)  # 5 blocks
    assert m.get_num_skipped_tokens(16) == 9
    m.remove_skipped_blocks("r", 16)  # 2 whole blocks skipped
    table = m.req_to_blocks["r"]
    assert [b.is_null for b in table] == [True, True, False, False, False]
    assert [b.block_id for b in pool.free_block_queue.get_all_free_blocks()][:2] == [2, 1]


def test_chunked_local_hit_nulls_blocks_before_current_chunk():
    pool = BlockPool(16, True)
    spec = ChunkedLocalAttentionSpec(block_size=BS, attention_chunk_size=8)
    m = ChunkedLocalAttentionManager(spec, pool, True, 0)
    r = cached_request(pool, m, list(range(16)))
    blocks, hit = ChunkedLocalAttentionManager.find_longest_cache_hit(
        r.block_hashes, 15, [0], pool, spec, BS
    )
    assert hit == 12
    assert [b.is_null for b in blocks[0]] == [True, True, False]
    blocks, hit = ChunkedLocalAttentionManager.find_longest_cache_hit(
        r.block_hashes, 16, [0], pool, spec, BS
    )
    assert hit == 16 and all(b.is_null for b in blocks[0])
    assert m.get_num_skipped_tokens(13) == 8 and m.get_num_skipped_tokens(7) == 0


def test_blocks_to_allocate_counts_evictable_hits():
    pool = BlockPool(16, True)
    spec = FullAttentionSpec(block_size=BS)
    m = FullAttentionManager(spec, pool, True, 0)
    r = cached_request(pool, m, list(range(8)))
    m.free("w")  # both cached blocks now sit in the free queue
    hits, _ = FullAttentionManager.find_longest_cache_hit(r.block_hashes, 8, [0], pool, spec, BS)
    # 12 tokens need 3 blocks: 2 are hits (both evictable, so they count) + 1 new
    assert m.get_num_blocks_to_allocate("x", 12, hits[0], 8) == 1 + 2
    m.add_local_computed_blocks("x", hits[0], 8)
    assert m.get_num_blocks_to_allocate("x", 12, [], 8) == 1  # running: fast path


def test_admission_cap_for_sliding_window():
    spec = SlidingWindowSpec(block_size=BS, sliding_window=8)
    cap = spec.max_admission_blocks_per_request(max_in_flight_tokens=16, max_model_len=1000)
    assert cap == 7  # cdiv(7 + 16, 4) + 1
    pool = BlockPool(64, True)
    m = SlidingWindowManager(spec, pool, True, 0, max_admission_blocks_per_request=cap)
    assert m.get_num_blocks_to_allocate("r", 400, [], 0, apply_admission_cap=True) == 7
    assert m.get_num_blocks_to_allocate("r", 400, [], 0) == 100


def test_free_releases_tail_first_and_trims_null_head():
    pool = BlockPool(16, True)
    spec = SlidingWindowSpec(block_size=BS, sliding_window=4)
    m = SlidingWindowManager(spec, pool, True, 0)
    m.allocate_new_blocks("r", 16)
    m.remove_skipped_blocks("r", 12)  # skips 9 tokens: 2 blocks nulled
    m.free("r")
    queue = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
    assert queue[:4] == [4, 3, 2, 1]
    assert "r" not in m.req_to_blocks
