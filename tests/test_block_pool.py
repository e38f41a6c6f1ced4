"""BlockPool: null block, lazy eviction, free order, duplicates, reset, events."""

import pytest

from kvcore.block_hashing import BlockHasher
from kvcore.block_pool import BlockPool
from kvcore.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from kvcore.request import Request


def queue_ids(pool):
    return [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]


def req(tokens, rid="r"):
    return Request(rid, tokens, 1, block_hasher=BlockHasher.from_name(4, "sha256"))


def test_null_block_is_block_zero_and_never_handed_out():
    pool = BlockPool(5, enable_caching=True)
    assert pool.null_block.block_id == 0 and pool.null_block.is_null
    assert [b.block_id for b in pool.get_new_blocks(4)] == [1, 2, 3, 4]
    with pytest.raises(ValueError):
        pool.get_new_blocks(1)
    pool.free_blocks([pool.null_block])  # ignored
    assert pool.get_num_free_blocks() == 0
    pool.check_invariants()


def test_usage_excludes_null_block():
    pool = BlockPool(11, enable_caching=True)
    pool.get_new_blocks(5)
    assert pool.get_usage() == pytest.approx(0.5)


def test_free_order_unhashed_to_head_hashed_to_tail():
    pool = BlockPool(8, enable_caching=True)
    r = req(list(range(12)))  # 3 full blocks of 4
    blocks = pool.get_new_blocks(4)  # ids 1..4; the 4th stays unhashed
    pool.cache_full_blocks(r, blocks, 0, 3, 4, 0)
    pool.free_blocks(list(reversed(blocks)))
    # vLLM's op sample: freeing [1,2,3,5] with 5 unhashed gives [5, ..., 3, 2, 1]
    assert queue_ids(pool) == [4, 5, 6, 7, 3, 2, 1]
    pool.check_invariants()


def test_lazy_eviction_from_head_and_touch_removes_from_queue():
    pool = BlockPool(4, enable_caching=True, enable_kv_cache_events=True)
    r = req(list(range(8)))
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(r, blocks, 0, 2, 4, 0)
    pool.free_blocks(list(reversed(blocks)))  # queue: [3, 2, 1]
    assert pool.get_cached_block(r.block_hashes[0], [0])[0].block_id == 1
    pool.touch([pool.blocks[1]])  # a prefix hit pulls block 1 out of the queue
    assert queue_ids(pool) == [3, 2] and pool.blocks[1].ref_cnt == 1
    pool.take_events()
    got = pool.get_new_blocks(2)  # takes 3 (plain) then evicts 2
    assert [b.block_id for b in got] == [3, 2]
    assert pool.get_cached_block(r.block_hashes[1], [0]) is None
    events = pool.take_events()
    assert len(events) == 1 and isinstance(events[0], BlockRemoved)
    pool.check_invariants()


def test_duplicates_are_not_merged_and_first_wins():
    pool = BlockPool(6, enable_caching=True)
    r1, r2 = req([1, 2, 3, 4], "a"), req([1, 2, 3, 4], "b")
    b1 = pool.get_new_blocks(1)
    b2 = pool.get_new_blocks(1)
    pool.cache_full_blocks(r1, b1, 0, 1, 4, 0)
    pool.cache_full_blocks(r2, b2, 0, 1, 4, 0)
    assert pool.get_cached_block(r1.block_hashes[0], [0])[0] is b1[0]
    pool.free_blocks(b1)
    pool.get_new_blocks(4)  # evicts b1 (head of queue after the 3 plain blocks)
    assert pool.get_cached_block(r1.block_hashes[0], [0])[0] is b2[0]
    pool.check_invariants()


def test_groups_are_separate_keys():
    pool = BlockPool(6, enable_caching=True)
    r = req([1, 2, 3, 4])
    pool.cache_full_blocks(r, pool.get_new_blocks(1), 0, 1, 4, 0)
    assert pool.get_cached_block(r.block_hashes[0], [0]) is not None
    assert pool.get_cached_block(r.block_hashes[0], [0, 1]) is None


def test_reset_prefix_cache_only_when_idle():
    pool = BlockPool(6, enable_caching=True, enable_kv_cache_events=True)
    r = req(list(range(8)))
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(r, blocks, 0, 2, 4, 0)
    assert pool.reset_prefix_cache() is False
    pool.free_blocks(blocks)
    assert pool.reset_prefix_cache() is True
    assert pool.get_num_cached_blocks() == 0
    assert isinstance(pool.take_events()[-1], AllBlocksCleared)
    pool.check_invariants()


def test_block_stored_event_chains_parent():
    pool = BlockPool(6, enable_caching=True, enable_kv_cache_events=True)
    r = req(list(range(12)))
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(r, blocks, 0, 1, 4, 0)
    pool.cache_full_blocks(r, blocks, 1, 3, 4, 0)
    first, second = pool.take_events()
    assert isinstance(second, BlockStored) and first.parent_block_hash is None
    assert second.parent_block_hash == first.block_hashes[0]
    assert len(second.block_hashes) == 2 and len(second.token_ids) == 8


def test_caching_off_frees_everything_to_head():
    pool = BlockPool(5, enable_caching=False)
    blocks = pool.get_new_blocks(3)
    pool.free_blocks(list(reversed(blocks)))
    assert queue_ids(pool) == [3, 2, 1, 4]


def test_check_invariants_detects_corruption():
    pool = BlockPool(5, enable_caching=True)
    blocks = pool.get_new_blocks(2)
    blocks[0].ref_cnt = 0  # held block with no reference, not in the queue
    with pytest.raises(AssertionError):
        pool.check_invariants()


def test_bad_pool_size():
    with pytest.raises(ValueError, match="num_gpu_blocks"):
        BlockPool(0, enable_caching=True)
