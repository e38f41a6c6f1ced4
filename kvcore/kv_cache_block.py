"""KV cache block metadata and the free-block queue.

Mirrors ``KVCacheBlock`` and ``FreeKVCacheBlockQueue`` of
``vllm/v1/core/kv_cache_utils.py`` (vLLM 0.33.0). The queue is an intrusive doubly
linked list threaded through the blocks themselves, so that removing a block from the
middle (a prefix-cache hit on a free block) is O(1) and no Python object is
allocated on any queue operation.

Queue order is eviction order: the head is evicted (reused) first.
"""

from __future__ import annotations

from collections.abc import Iterable

BlockHash = bytes | int
"""A block's hash: bytes from vLLM's hash functions, a 64-bit int from
:class:`kvcore.block_hashing.FastBlockHasher` (the simulator's)."""


def block_hash_with_group_id(block_hash: BlockHash, group_id: int) -> bytes:
    """vLLM's prefix-cache key: the hash (an int hash as 8 big-endian bytes), then the
    group id as 4 big-endian bytes (``make_block_hash_with_group_id``)."""
    if isinstance(block_hash, int):
        block_hash = (block_hash & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")
    return block_hash + group_id.to_bytes(4, "big")


UNKEYED = -1
"""The block hash an unshared request's block holds until the request is preempted
(a kvsim shortcut, :class:`kvcore.block_hashing.UnkeyedHasher`): no hasher gives it
(Python's ``hash`` never returns -1, vLLM's hash functions give bytes), and it never
enters the pool's hash map, so no lookup hits it;
:meth:`kvcore.block_pool.BlockPool.list_blocks` gives each such block a key of its own
when its request is preempted."""


class KVCacheBlock:
    """Metadata of one KV cache block (mirrors vLLM's ``KVCacheBlock``).

    While the block is full and cached, ``block_hash`` is its prefix-cache key: the
    block hash followed by the 4-byte big-endian group id (vLLM's
    ``BlockHashWithGroupId``); else ``None``. Internally the two parts are kept apart
    (``_hash``, ``_group``) so that lookups need not build a key.
    """

    __slots__ = (
        "block_id",
        "ref_cnt",
        "_hash",
        "_group",
        "prev_free_block",
        "next_free_block",
        "is_null",
        "_unlisted",
    )

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self._hash: BlockHash | None = None
        self._group = 0
        self.prev_free_block: KVCacheBlock | None = None
        self.next_free_block: KVCacheBlock | None = None
        self.is_null = False
        self._unlisted = False
        """Cached (``_hash`` set) but not in the pool's hash map: an unshared request's
        block, which no lookup can find before its request is preempted."""

    @property
    def block_hash(self) -> bytes | None:
        """The prefix-cache key (hash + 4-byte group id), or None when not cached."""
        if self._hash is None:
            return None
        return block_hash_with_group_id(self._hash, self._group)

    def set_block_hash(self, block_hash: bytes) -> None:
        """Attach a prefix-cache key (hash + 4-byte group id); a block holds at most one."""
        if self._hash is not None:
            raise RuntimeError(f"block {self.block_id} already has a hash")
        self._hash = block_hash[:-4]
        self._group = int.from_bytes(block_hash[-4:], "big")

    def reset_hash(self) -> None:
        """Forget the prefix-cache key (on eviction or cache reset)."""
        self._hash = None
        self._unlisted = False

    def __repr__(self) -> str:
        prev_id = self.prev_free_block.block_id if self.prev_free_block else None
        next_id = self.next_free_block.block_id if self.next_free_block else None
        return (
            f"KVCacheBlock(block_id={self.block_id}, ref_cnt={self.ref_cnt}, "
            f"block_hash={self.block_hash!r}, prev={prev_id}, next={next_id})"
        )


class FreeKVCacheBlockQueue:
    """Doubly linked list of free blocks in eviction order.

    Mirrors vLLM's ``FreeKVCacheBlockQueue``: initialised in the given order
    (block id order), with sentinel head and tail blocks so that every real block in
    the queue has both neighbours. ``num_free_blocks`` is kept as a counter.
    """

    __slots__ = ("num_free_blocks", "fake_free_list_head", "fake_free_list_tail")

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self.num_free_blocks = len(blocks)
        head = KVCacheBlock(-1)
        tail = KVCacheBlock(-1)
        self.fake_free_list_head = head
        self.fake_free_list_tail = tail
        prev = head
        for block in blocks:
            prev.next_free_block = block
            block.prev_free_block = prev
            prev = block
        prev.next_free_block = tail
        tail.prev_free_block = prev

    def popleft(self) -> KVCacheBlock:
        """Remove and return the head block (ValueError when empty)."""
        block = self.fake_free_list_head.next_free_block
        if block is self.fake_free_list_tail:
            raise ValueError("No free blocks available")
        nxt = block.next_free_block  # type: ignore[union-attr]
        self.fake_free_list_head.next_free_block = nxt
        nxt.prev_free_block = self.fake_free_list_head  # type: ignore[union-attr]
        block.prev_free_block = block.next_free_block = None  # type: ignore[union-attr]
        self.num_free_blocks -= 1
        return block  # type: ignore[return-value]

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Remove and return the first ``n`` blocks, head first."""
        if n == 0:
            return []
        if n > self.num_free_blocks:
            raise ValueError(f"cannot pop {n} blocks from a queue of {self.num_free_blocks}")
        self.num_free_blocks -= n
        head = self.fake_free_list_head
        block = head.next_free_block
        out: list[KVCacheBlock] = []
        append = out.append
        for _ in range(n):
            append(block)  # type: ignore[arg-type]
            nxt = block.next_free_block  # type: ignore[union-attr]
            block.prev_free_block = block.next_free_block = None  # type: ignore[union-attr]
            block = nxt
        head.next_free_block = block
        block.prev_free_block = head  # type: ignore[union-attr]
        return out

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink ``block`` from anywhere in the queue in O(1)."""
        prev = block.prev_free_block
        nxt = block.next_free_block
        if prev is None or nxt is None:
            raise RuntimeError(f"remove() of a block not in the free queue: {block}")
        prev.next_free_block = nxt
        nxt.prev_free_block = prev
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        """Put ``block`` at the tail (evicted last)."""
        tail = self.fake_free_list_tail
        last = tail.prev_free_block
        last.next_free_block = block  # type: ignore[union-attr]
        block.prev_free_block = last
        block.next_free_block = tail
        tail.prev_free_block = block
        self.num_free_blocks += 1

    def append_n(self, blocks: list[KVCacheBlock]) -> None:
        """Put ``blocks`` at the tail, keeping their order."""
        if not blocks:
            return
        tail = self.fake_free_list_tail
        prev = tail.prev_free_block
        for block in blocks:
            prev.next_free_block = block  # type: ignore[union-attr]
            block.prev_free_block = prev
            prev = block
        prev.next_free_block = tail  # type: ignore[union-attr]
        tail.prev_free_block = prev
        self.num_free_blocks += len(blocks)

    def prepend_n(self, blocks: list[KVCacheBlock]) -> None:
        """Put ``blocks`` at the head, keeping their order (``blocks[0]`` is the new head)."""
        if not blocks:
            return
        head = self.fake_free_list_head
        first = head.next_free_block
        prev = head
        for block in blocks:
            prev.next_free_block = block
            block.prev_free_block = prev
            prev = block
        prev.next_free_block = first
        first.prev_free_block = prev  # type: ignore[union-attr]
        self.num_free_blocks += len(blocks)

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """All free blocks, head (next evicted) first."""
        out: list[KVCacheBlock] = []
        block = self.fake_free_list_head.next_free_block
        tail = self.fake_free_list_tail
        while block is not tail:
            out.append(block)  # type: ignore[arg-type]
            block = block.next_free_block  # type: ignore[union-attr]
        return out

    def __iter__(self) -> Iterable[KVCacheBlock]:
        return iter(self.get_all_free_blocks())
