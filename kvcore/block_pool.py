"""The pool of KV cache blocks: allocation, prefix-cache registration, eviction.

Mirrors ``BlockPool`` and ``BlockHashToBlockMap`` of ``vllm/v1/core/block_pool.py``
(vLLM 0.33.0), for the case ``hash_block_size == block_size`` (no sub-block hits).

vLLM keys one map by ``block hash + 4-byte group id``; kvcore keeps one map per KV
cache group keyed by the block hash itself (same lookups, no key to build: the
request's hash objects are reused and their Python hash is cached).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from kvcore.block_hashing import external_block_hash
from kvcore.kv_cache_block import (
    UNKEYED,
    BlockHash,
    FreeKVCacheBlockQueue,
    KVCacheBlock,
    block_hash_with_group_id,
)
from kvcore.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVCacheEvent

if TYPE_CHECKING:
    from kvcore.request import Request

CacheEntry = KVCacheBlock | dict[int, KVCacheBlock]
"""One cached block, or ``{block_id: block}`` when several hold identical content."""


def _add_duplicate(
    cache: dict[BlockHash, CacheEntry], h: BlockHash, existing: CacheEntry, blk: KVCacheBlock
) -> None:
    """Cache ``blk`` under ``h`` beside the block(s) ``existing`` already there: the
    entry becomes (or grows) a dict by block id, its first block still the one a lookup
    returns."""
    if isinstance(existing, dict):
        existing[blk.block_id] = blk
    else:
        cache[h] = {existing.block_id: existing, blk.block_id: blk}


_FIRST_KEY = 1 << 64
"""The first key :meth:`BlockPool.list_blocks` gives an unkeyed block: above any
64-bit hash, so no hasher's value equals a key."""


class BlockPool:
    """Owns every ``KVCacheBlock`` and the free queue (mirrors vLLM's ``BlockPool``).

    Block 0 is popped at construction as the null block (a placeholder for blocks
    skipped by sliding-window / chunked-local attention); it is never freed, evicted
    or counted. Free blocks sit in the queue in eviction order; a free block may
    still be cached (have a hash) until it is reused, which evicts it lazily.
    Duplicate content is not merged (vLLM keeps block tables append-only): a lookup
    returns the block cached first under that hash.
    """

    def __init__(
        self, num_gpu_blocks: int, enable_caching: bool, enable_kv_cache_events: bool = False
    ) -> None:
        if not isinstance(num_gpu_blocks, int) or num_gpu_blocks <= 0:
            raise ValueError(f"num_gpu_blocks must be a positive int, got {num_gpu_blocks!r}")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.enable_kv_cache_events = enable_kv_cache_events
        self.blocks = [KVCacheBlock(i) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self._maps: list[dict[BlockHash, CacheEntry]] = []
        """Per KV cache group: block hash -> cached block(s)."""
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        self.kv_event_queue: list[KVCacheEvent] = []
        self.num_cached_blocks = 0
        """Blocks carrying a prefix-cache hash (held or free)."""
        self.num_cached_free_blocks = 0
        """Cached blocks no request holds: in the free queue, evicted on reuse."""
        self._head = self.free_block_queue.fake_free_list_head
        self._tail = self.free_block_queue.fake_free_list_tail
        self._next_key = _FIRST_KEY
        """The key :meth:`list_blocks` gives the next unkeyed block."""

    @property
    def cached_block_hash_to_block(self) -> dict[bytes, CacheEntry]:
        """The cache as vLLM keys it (hash + group id -> block(s)); a fresh dict."""
        return {
            block_hash_with_group_id(h, gid): entry
            for gid, m in enumerate(self._maps)
            for h, entry in m.items()
        }

    def _map(self, group_id: int) -> dict[BlockHash, CacheEntry]:
        maps = self._maps
        while len(maps) <= group_id:
            maps.append({})
        return maps[group_id]

    # -- prefix cache lookups ------------------------------------------------------

    def get_cached_block(
        self, block_hash: BlockHash, kv_cache_group_ids: Sequence[int]
    ) -> list[KVCacheBlock] | None:
        """One cached block per group for ``block_hash``, or None if any group misses.

        With duplicates, the first block cached under the hash is returned.
        """
        maps = self._maps
        if len(kv_cache_group_ids) == 1:  # the common case, without the loop
            gid = kv_cache_group_ids[0]
            if gid >= len(maps):
                return None
            hit = maps[gid].get(block_hash)
            if hit is None:
                return None
            if type(hit) is dict:
                hit = next(iter(hit.values()))
            return [hit]  # type: ignore[list-item]
        out = []
        for gid in kv_cache_group_ids:
            if gid >= len(maps):
                return None
            hit = maps[gid].get(block_hash)
            if hit is None:
                return None
            if type(hit) is dict:
                hit = next(iter(hit.values()))
            out.append(hit)
        return out  # type: ignore[return-value]

    def cache_full_blocks(
        self,
        request: Request,
        blocks: Sequence[KVCacheBlock],
        num_cached_blocks: int,
        num_full_blocks: int,
        block_size: int,
        kv_cache_group_id: int,
        block_mask: Sequence[bool] | None = None,
        unlisted: bool = False,
    ) -> None:
        """Register ``blocks[num_cached_blocks:num_full_blocks]`` in the prefix cache.

        Their hashes come from ``request.block_hashes``; null blocks (and blocks the
        mask excludes) are skipped. Emits one ``BlockStored`` event per call.

        ``unlisted`` (a kvsim shortcut, without KV events only): the blocks are cached
        (counted, evicted in their turn) but kept out of the hash map, where only a
        lookup could tell: the caller's request is unshared
        (:attr:`kvcore.request.Request.unshared`), so no lookup finds them before
        :meth:`list_blocks` puts them there at its preemption. Dropping them on
        eviction then costs no map update either.
        """
        if num_cached_blocks >= num_full_blocks:
            return
        block_hashes = request.block_hashes
        if num_full_blocks > len(block_hashes):
            raise IndexError("fewer block hashes than full blocks")
        maps = self._maps
        cache = (
            maps[kv_cache_group_id]
            if kv_cache_group_id < len(maps)
            else self._map(kv_cache_group_id)
        )
        null = self.null_block
        events = self.enable_kv_cache_events
        unlisted = unlisted and not events
        added = 0
        new_hashes: list[int] = []
        for i in range(num_cached_blocks, num_full_blocks):
            blk = blocks[i]
            if blk is null or (block_mask is not None and not block_mask[i - num_cached_blocks]):
                continue
            if blk._hash is not None:
                raise RuntimeError(f"block {blk.block_id} is already cached")
            h = block_hashes[i]
            blk._hash = h
            blk._group = kv_cache_group_id
            added += 1
            if unlisted:
                blk._unlisted = True
                continue
            existing = cache.setdefault(h, blk)  # one lookup: the usual new hash
            if existing is not blk:
                _add_duplicate(cache, h, existing, blk)
            if events:
                new_hashes.append(external_block_hash(h))
        self.num_cached_blocks += added
        if events:
            self._emit_block_stored(
                request, new_hashes, num_cached_blocks, num_full_blocks, block_size,
                kv_cache_group_id,
            )  # fmt: skip

    def _emit_block_stored(
        self,
        request: Request,
        new_hashes: list[int],
        num_cached_blocks: int,
        num_full_blocks: int,
        block_size: int,
        group_id: int,
    ) -> None:
        block_hashes = request.block_hashes
        parent = (
            external_block_hash(block_hashes[num_cached_blocks - 1])
            if num_cached_blocks > 0
            else None
        )
        lora = request.lora_request
        tokens = request.all_token_ids[
            num_cached_blocks * block_size : num_full_blocks * block_size
        ]
        self.kv_event_queue.append(
            BlockStored(
                block_hashes=new_hashes,
                parent_block_hash=parent,
                token_ids=list(tokens),
                block_size=block_size,
                lora_id=lora.lora_int_id if lora is not None else None,
                group_idx=group_id,
                lora_name=lora.lora_name if lora is not None else None,
            )
        )

    # -- allocation and release ----------------------------------------------------

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Pop ``num_blocks`` blocks from the queue head, evicting cached ones.

        Raises ValueError when fewer blocks are free (callers check first).
        """
        queue = self.free_block_queue
        if not 0 <= num_blocks <= queue.num_free_blocks:
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        # popleft_n and the eviction / ref-count loop fused into one pass. The asserts
        # narrow the links' type (the tail sentinel ends the queue), which lets the
        # compiled build read and write the blocks' fields directly.
        queue.num_free_blocks -= num_blocks
        head = self._head
        link = head.next_free_block
        assert link is not None
        block = link
        ret: list[KVCacheBlock] = []
        evicted = 0
        dropped = 0  # evicted here, not by _evict_cached_block (which counts its own)
        # Popped blocks keep stale queue links: nothing reads them while a block is
        # referenced (touch only unlinks blocks whose ref_cnt is 0, free relinks).
        maps = self._maps
        events = self.enable_kv_cache_events
        for _ in range(num_blocks):
            ret.append(block)
            block.ref_cnt = 1  # free blocks are unreferenced
            h = block._hash
            if h is not None:
                evicted += 1
                # _evict_cached_block, inlined for its usual cases: the block is not
                # in the hash map (unlisted) or the only one cached under its hash.
                if block._unlisted:
                    block._unlisted = False
                    block._hash = None
                    dropped += 1
                else:
                    cache = maps[block._group]
                    if not events and cache.get(h) is block:
                        del cache[h]
                        block._hash = None
                        dropped += 1
                    else:
                        self._evict_cached_block(block)
            link = block.next_free_block
            assert link is not None
            block = link
        head.next_free_block = block
        block.prev_free_block = head
        if evicted:
            self.num_cached_free_blocks -= evicted
            self.num_cached_blocks -= dropped
        return ret

    def _evict_cached_block(self, block: KVCacheBlock) -> None:
        """Drop ``block`` (a listed one) from the prefix cache and clear its hash."""
        h = block._hash
        cache = self._maps[block._group]
        hit = cache.get(h)  # type: ignore[arg-type]
        removed = hit is block
        if removed:
            del cache[h]  # type: ignore[arg-type]
        elif type(hit) is dict and block.block_id in hit:
            del hit[block.block_id]
            if not hit:
                del cache[h]  # type: ignore[arg-type]
            removed = True
        block._hash = None
        self.num_cached_blocks -= 1
        if removed and self.enable_kv_cache_events:
            self.kv_event_queue.append(
                BlockRemoved(block_hashes=[external_block_hash(h)], group_idx=block._group)  # type: ignore[arg-type]
            )

    def list_blocks(self, blocks: Sequence[KVCacheBlock], block_hashes: list[BlockHash]) -> None:
        """Put the unlisted ones of ``blocks`` (still cached) into the hash map, as
        :meth:`cache_full_blocks` would have: their request was preempted, and the
        lookup of its next admission may hit them.

        ``blocks``: one group's blocks of the request, ``block_hashes`` its hashes. A
        block hashed :data:`kvcore.kv_cache_block.UNKEYED` gets its hash's key (a new
        one when the hash is still unkeyed, written into ``block_hashes``): an int no
        hasher gives, unique in this pool, which the request's lookup then finds."""
        for i, blk in enumerate(blocks):
            if not blk._unlisted:
                continue
            blk._unlisted = False
            h = blk._hash
            assert h is not None  # unlisted blocks are cached
            if h == UNKEYED:
                h = block_hashes[i]
                if h == UNKEYED:
                    h = block_hashes[i] = self._next_key
                    self._next_key += 1
                blk._hash = h
            cache = self._map(blk._group)
            existing = cache.setdefault(h, blk)
            if existing is not blk:
                _add_duplicate(cache, h, existing, blk)

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take a reference on prefix-hit blocks, pulling free ones out of the queue."""
        null = self.null_block
        unlinked = 0
        cached = 0
        for block in blocks:
            if block is null:
                continue
            if block.ref_cnt == 0:  # in the free queue: unlink it (queue.remove, inlined)
                prev = block.prev_free_block
                nxt = block.next_free_block
                assert prev is not None and nxt is not None  # the sentinels bound it
                prev.next_free_block = nxt
                nxt.prev_free_block = prev
                block.prev_free_block = block.next_free_block = None
                unlinked += 1
                if block._hash is not None:
                    cached += 1
            block.ref_cnt += 1
        if unlinked:
            self.free_block_queue.num_free_blocks -= unlinked
            self.num_cached_free_blocks -= cached

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference from each block, in eviction-priority order.

        Blocks reaching zero go to the queue: unhashed ones (or all, with caching
        off) to the head in the given order, so they are reused first; hashed ones
        to the tail, so they stay cached as long as possible. (Same result as
        vLLM's ``prepend_n(evict_first)`` then ``append_n(evict_last)``, linked in
        one pass: unhashed blocks go after the last one placed at the head.)
        """
        caching = self.enable_caching
        tail = self._tail
        ins = self._head  # unhashed blocks are linked right after ins
        link = tail.prev_free_block
        assert link is not None  # the head sentinel, when the queue is empty
        last = link  # hashed blocks are linked after last
        num_freed = 0
        num_cached = 0
        null = self.null_block
        for block in ordered_blocks:
            if block is null:
                continue
            ref_cnt = block.ref_cnt - 1
            block.ref_cnt = ref_cnt
            if ref_cnt:
                continue
            num_freed += 1
            if block._hash is None or not caching:
                nxt = ins.next_free_block
                assert nxt is not None  # the tail sentinel, at the latest
                ins.next_free_block = block
                block.prev_free_block = ins
                block.next_free_block = nxt
                nxt.prev_free_block = block
                if nxt is tail:  # the queue had nothing after ins: block is now last
                    last = block
                ins = block
            else:
                num_cached += 1
                last.next_free_block = block
                block.prev_free_block = last
                last = block
        if num_freed:
            last.next_free_block = tail  # close the list after the appended blocks
            tail.prev_free_block = last
            self.free_block_queue.num_free_blocks += num_freed
            self.num_cached_free_blocks += num_cached

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; only possible when no block is in use."""
        if self.num_gpu_blocks - self.free_block_queue.num_free_blocks != 1:
            return False
        self._maps = []
        for block in self.blocks:
            block.reset_hash()
        self.num_cached_blocks = self.num_cached_free_blocks = 0
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(AllBlocksCleared())
        return True

    # -- accounting ----------------------------------------------------------------

    def get_num_free_blocks(self) -> int:
        """Blocks in the free queue (including cached-but-unreferenced ones)."""
        return self.free_block_queue.num_free_blocks

    def get_usage(self) -> float:
        """Fraction of usable blocks (all but the null block) not free, in [0, 1]."""
        return BlockPool.usage_at(self.free_block_queue.num_free_blocks, self.num_gpu_blocks - 1)

    @staticmethod
    def usage_at(num_free_blocks: int, num_usable_blocks: int) -> float:
        """KV-cache usage (fraction in [0, 1]) of a pool with ``num_usable_blocks``
        blocks besides the null block, ``num_free_blocks`` of them free: what
        :meth:`get_usage` returns then; 0.0 when no block is usable. The one formula:
        records kept as block counts compute their usage with it."""
        if not num_usable_blocks:
            return 0.0
        return 1.0 - num_free_blocks / num_usable_blocks

    def get_num_cached_blocks(self) -> int:
        """Blocks that currently carry a prefix-cache hash."""
        return self.num_cached_blocks

    def take_events(self) -> list[KVCacheEvent]:
        """Return and clear the queued KV cache events."""
        if not self.enable_kv_cache_events:
            return []
        events, self.kv_event_queue = self.kv_event_queue, []
        return events

    def check_invariants(self) -> None:
        """Raise AssertionError if the pool's bookkeeping is inconsistent."""
        queue = self.free_block_queue.get_all_free_blocks()
        num_free = self.free_block_queue.num_free_blocks
        assert len(queue) == num_free, f"free queue holds {len(queue)} blocks but counts {num_free}"
        in_queue = {b.block_id for b in queue}
        assert len(in_queue) == len(queue), "a block appears twice in the free queue"
        assert self.null_block.block_id not in in_queue, "the null block is in the free queue"
        assert self.null_block._hash is None, "the null block is cached"
        cached = []
        for b in self.blocks:
            if b.is_null:
                continue
            assert b.ref_cnt >= 0, f"block {b.block_id} has ref_cnt {b.ref_cnt}"
            assert (b.ref_cnt == 0) == (b.block_id in in_queue), (
                f"block {b.block_id}: ref_cnt {b.ref_cnt} but in_queue={b.block_id in in_queue}"
            )
            if b._hash is not None:
                cached.append(b)
                assert self.enable_caching, f"block {b.block_id} cached with caching off"
                hit = self._maps[b._group].get(b._hash) if b._group < len(self._maps) else None
                listed = hit is b or (type(hit) is dict and hit.get(b.block_id) is b)
                assert b._unlisted or b._hash != UNKEYED, f"block {b.block_id} listed unkeyed"
                assert listed != b._unlisted, (
                    f"cached block {b.block_id} {'in' if listed else 'missing from'} the hash map"
                )
            else:
                assert not b._unlisted, f"uncached block {b.block_id} marked unlisted"
        assert self.num_cached_blocks == len(cached), (
            f"num_cached_blocks {self.num_cached_blocks} != {len(cached)}"
        )
        cached_free = sum(1 for b in cached if b.ref_cnt == 0)
        assert self.num_cached_free_blocks == cached_free, (
            f"num_cached_free_blocks {self.num_cached_free_blocks} != {cached_free}"
        )
        for gid, m in enumerate(self._maps):
            for h, hit in m.items():
                assert hit, "empty duplicate set in the hash map"
                for b in hit.values() if type(hit) is dict else (hit,):  # type: ignore[assignment]
                    assert b._hash == h and b._group == gid, (
                        f"hash map entry of block {b.block_id} is stale"
                    )
