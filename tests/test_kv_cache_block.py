"""FreeKVCacheBlockQueue: order, O(1) removal, head/tail insertion."""

import pytest

from kvcore.kv_cache_block import FreeKVCacheBlockQueue, KVCacheBlock


def ids(queue):
    return [b.block_id for b in queue.get_all_free_blocks()]


def make(n):
    blocks = [KVCacheBlock(i) for i in range(n)]
    return blocks, FreeKVCacheBlockQueue(blocks)


def test_initial_order_and_popleft():
    blocks, q = make(5)
    assert ids(q) == [0, 1, 2, 3, 4]
    assert q.popleft() is blocks[0]
    assert q.num_free_blocks == 4
    assert blocks[0].prev_free_block is None and blocks[0].next_free_block is None


def test_popleft_n_takes_head_in_order():
    blocks, q = make(6)
    got = q.popleft_n(3)
    assert [b.block_id for b in got] == [0, 1, 2]
    assert ids(q) == [3, 4, 5] and q.num_free_blocks == 3
    assert q.popleft_n(0) == []
    with pytest.raises(ValueError):
        q.popleft_n(4)


def test_remove_from_middle_and_ends():
    blocks, q = make(5)
    q.remove(blocks[2])
    q.remove(blocks[0])
    q.remove(blocks[4])
    assert ids(q) == [1, 3]
    assert q.num_free_blocks == 2
    with pytest.raises(RuntimeError):
        q.remove(blocks[2])


def test_append_append_n_prepend_n_keep_given_order():
    blocks, q = make(6)
    taken = q.popleft_n(4)  # queue: [4, 5]
    q.append(taken[0])
    q.append_n([taken[2], taken[1]])
    q.prepend_n([taken[3]])
    assert ids(q) == [3, 4, 5, 0, 2, 1]
    assert q.num_free_blocks == 6
    q.popleft_n(6)
    with pytest.raises(ValueError):
        q.popleft()
    q.prepend_n([blocks[5], blocks[1]])  # into an empty queue
    assert ids(q) == [5, 1]


def test_set_block_hash_only_once():
    b = KVCacheBlock(3)
    b.set_block_hash(b"x")
    with pytest.raises(RuntimeError):
        b.set_block_hash(b"y")
    b.reset_hash()
    assert b.block_hash is None
