"""Property tests of ``kvcore.block_pool.BlockPool`` against a reference model.

A Hypothesis state machine drives one pool through random ``get_new_blocks``,
``get_cached_block`` + ``touch`` (prefix hits), ``cache_full_blocks``,
``free_blocks`` (a request's table in reverse, as the managers free),
``reset_prefix_cache`` and lookups. A plain-Python model tracks every holder's
block table, each block's hash and the exact free-queue order (LRU eviction
order), and after every operation the pool must agree with it and pass
``check_invariants``.

Operation count per CI run (each rule is one pool operation; the counter
``OPS`` is checked at the end of the state machine's test): ``max_examples=150`` runs of
``stateful_step_count=400`` steps give at most 60,000 operations; Hypothesis ends
a few runs early, so the floor asserted is 45,000.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kvcore.block_pool import BlockPool
from kvcore.kv_cache_block import KVCacheBlock
from kvcore.request import Request

MAX_EXAMPLES = 150
STEPS_PER_EXAMPLE = 400
MIN_OPS = 45_000
NUM_PREFIXES = 4  # few hash chains, so identical content (duplicate keys) is common
NUM_GROUPS = 2

OPS = {"count": 0}
"""Pool operations executed by the state machine in this process."""

SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    stateful_step_count=STEPS_PER_EXAMPLE,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def chain_hash(prefix: int, index: int) -> bytes:
    """Hash of block ``index`` of hash chain ``prefix`` (32 bytes, like sha256)."""
    return f"p{prefix}-b{index}".encode().ljust(32, b".")


def key_of(block_hash: bytes, group: int) -> bytes:
    """The pool's prefix-cache key: hash + 4-byte big-endian group id."""
    return block_hash + group.to_bytes(4, "big")


@dataclass
class Holder:
    """A request-like owner of one block table in one KV cache group."""

    prefix: int
    group: int
    blocks: list[KVCacheBlock] = field(default_factory=list)
    num_cached: int = 0
    request: Request = field(init=False)

    def __post_init__(self) -> None:
        # A request without a hasher: its hash chain is filled in by ensure_hashes.
        self.request = Request(f"holder-{self.prefix}", [self.prefix], max_tokens=1)

    def ensure_hashes(self, num_blocks: int, block_size: int) -> None:
        """Extend the request's hash chain and tokens to ``num_blocks`` blocks."""
        hashes = self.request.block_hashes
        while len(hashes) < num_blocks:
            hashes.append(chain_hash(self.prefix, len(hashes)))
        tokens = self.request._all_token_ids
        if len(tokens) < num_blocks * block_size:
            tokens.extend([self.prefix] * (num_blocks * block_size - len(tokens)))


class BlockPoolMachine(RuleBasedStateMachine):
    """Random pool operations checked against a full reference model."""

    BLOCK_SIZE = 4

    def __init__(self) -> None:
        super().__init__()
        self.pool: BlockPool | None = None
        self.holders: dict[int, Holder] = {}
        self.next_holder = 0
        self.queue: list[int] = []  # model free queue, head (evicted first) first
        self.hash_of: dict[int, bytes] = {}  # model: block id -> cache key
        self.cache: dict[bytes, list[int]] = {}  # model: key -> block ids, insertion order

    # -- setup ---------------------------------------------------------------------

    @initialize(num_blocks=st.integers(2, 40))
    def make_pool(self, num_blocks: int) -> None:
        self.pool = BlockPool(num_blocks, enable_caching=True)
        self.queue = list(range(1, num_blocks))

    # -- helpers -------------------------------------------------------------------

    def _free_count(self) -> int:
        return len(self.queue)

    def _evict(self, block_id: int) -> None:
        key = self.hash_of.pop(block_id, None)
        if key is not None:
            ids = self.cache[key]
            ids.remove(block_id)
            if not ids:
                del self.cache[key]

    def _take(self, n: int) -> list[KVCacheBlock]:
        """get_new_blocks(n), checked against the model queue head."""
        expected = self.queue[:n]
        got = self.pool.get_new_blocks(n)
        OPS["count"] += 1
        assert [b.block_id for b in got] == expected, "blocks not taken from the queue head"
        del self.queue[:n]
        for b in got:
            self._evict(b.block_id)
            assert not b.is_null and b.ref_cnt == 1 and b.block_hash is None, b
        return got

    def _lookup_hits(self, holder: Holder, max_blocks: int) -> list[KVCacheBlock]:
        """Longest cached prefix of the holder's chain via get_cached_block."""
        hits = []
        for i in range(max_blocks):
            h = chain_hash(holder.prefix, i)
            got = self.pool.get_cached_block(h, [holder.group])
            OPS["count"] += 1
            ids = self.cache.get(key_of(h, holder.group))
            if ids is None:
                assert got is None, f"phantom hit for {h!r}"
                break
            assert got is not None and len(got) == 1 and got[0].block_id == ids[0], (
                "get_cached_block must return the first block cached under the key"
            )
            hits.append(got[0])
        return hits

    # -- rules ---------------------------------------------------------------------

    @precondition(lambda self: self.pool is not None)
    @rule(
        prefix=st.integers(0, NUM_PREFIXES - 1),
        group=st.integers(0, NUM_GROUPS - 1),
        want_hits=st.integers(0, 6),
        num_new=st.integers(0, 5),
        with_null=st.booleans(),
    )
    def admit(self, prefix: int, group: int, want_hits: int, num_new: int, with_null: bool) -> None:
        """A new holder: touch up to ``want_hits`` prefix hits, then take new blocks."""
        holder = Holder(prefix, group)
        hits = self._lookup_hits(holder, want_hits)
        num_new = min(num_new, self._free_count() - sum(1 for b in hits if b.ref_cnt == 0))
        if not hits and num_new <= 0:
            return
        if with_null and hits:
            # Sliding-window style: the first hit replaced by the null block.
            hits[0] = self.pool.null_block
        self.pool.touch(hits)
        OPS["count"] += 1
        for b in hits:
            if not b.is_null and b.block_id in self.queue:
                self.queue.remove(b.block_id)
        holder.blocks = list(hits)
        holder.num_cached = len(hits)
        if num_new > 0:
            holder.blocks.extend(self._take(num_new))
        self.holders[self.next_holder] = holder
        self.next_holder += 1

    @precondition(lambda self: self.pool is not None and self.holders)
    @rule(data=st.data(), num_new=st.integers(1, 4))
    def grow(self, data: st.DataObject, num_new: int) -> None:
        """An existing holder takes more blocks (decode or next prefill chunk)."""
        hid = data.draw(st.sampled_from(sorted(self.holders)))
        num_new = min(num_new, self._free_count())
        if num_new == 0:
            return
        self.holders[hid].blocks.extend(self._take(num_new))

    @precondition(lambda self: self.pool is not None and self.holders)
    @rule(data=st.data(), extra=st.integers(1, 4))
    def cache(self, data: st.DataObject, extra: int) -> None:
        """Register up to ``extra`` more of a holder's full blocks in the prefix cache."""
        hid = data.draw(st.sampled_from(sorted(self.holders)))
        holder = self.holders[hid]
        num_full = min(len(holder.blocks), holder.num_cached + extra)
        if num_full <= holder.num_cached:
            return
        holder.ensure_hashes(num_full, self.BLOCK_SIZE)
        self.pool.cache_full_blocks(
            holder.request,
            holder.blocks,
            holder.num_cached,
            num_full,
            self.BLOCK_SIZE,
            holder.group,
        )
        OPS["count"] += 1
        for i in range(holder.num_cached, num_full):
            b = holder.blocks[i]
            if b.is_null:
                assert b.block_hash is None, "the null block got a hash"
                continue
            key = key_of(holder.request.block_hashes[i], holder.group)
            assert b.block_hash == key, f"block {b.block_id} cached under the wrong key"
            assert b.block_id not in self.hash_of, "a cached block was cached again"
            self.hash_of[b.block_id] = key
            self.cache.setdefault(key, []).append(b.block_id)
        holder.num_cached = num_full

    @precondition(lambda self: self.pool is not None and self.holders)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        """Free a holder's table tail first; unhashed blocks to the head, hashed to the tail."""
        hid = data.draw(st.sampled_from(sorted(self.holders)))
        holder = self.holders.pop(hid)
        ordered = list(reversed(holder.blocks))
        self.pool.free_blocks(ordered)
        OPS["count"] += 1
        remaining = {}
        for h in self.holders.values():
            for b in h.blocks:
                remaining[b.block_id] = remaining.get(b.block_id, 0) + 1
        released = [b.block_id for b in ordered if not b.is_null and b.block_id not in remaining]
        first = [i for i in released if i not in self.hash_of]
        last = [i for i in released if i in self.hash_of]
        self.queue = first + self.queue + last

    @precondition(lambda self: self.pool is not None)
    @rule(
        prefix=st.integers(0, NUM_PREFIXES - 1),
        index=st.integers(0, 6),
        group=st.integers(0, NUM_GROUPS),
    )
    def lookup(self, prefix: int, index: int, group: int) -> None:
        """A bare lookup (group ``NUM_GROUPS`` never holds anything)."""
        h = chain_hash(prefix, index)
        got = self.pool.get_cached_block(h, [group])
        OPS["count"] += 1
        ids = self.cache.get(key_of(h, group))
        assert (got is None) == (ids is None)
        if ids is not None:
            assert got[0].block_id == ids[0]

    @precondition(lambda self: self.pool is not None)
    @rule(drop_all=st.booleans())
    def reset_prefix_cache(self, drop_all: bool) -> None:
        """Reset succeeds exactly when no block is held; optionally free everything first."""
        if drop_all:
            for hid in sorted(self.holders):
                self.free(_FixedData(hid))
        ok = self.pool.reset_prefix_cache()
        OPS["count"] += 1
        assert ok == (
            not self.holders or all(all(b.is_null for b in h.blocks) for h in self.holders.values())
        )
        if ok:
            self.hash_of.clear()
            self.cache.clear()

    # -- checks --------------------------------------------------------------------

    @invariant()
    def matches_model(self) -> None:
        pool = self.pool
        if pool is None:
            return
        pool.check_invariants()
        n = pool.num_gpu_blocks
        null = pool.null_block
        assert null.block_id == 0 and null.is_null and null.ref_cnt == 0
        assert null.block_hash is None
        queue_ids = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
        assert queue_ids == self.queue, "free queue order differs from the model"
        assert pool.get_num_free_blocks() == len(self.queue)
        assert 0 not in queue_ids, "the null block is in the free queue"
        assert pool.get_usage() == pytest.approx(1.0 - len(self.queue) / (n - 1))
        refs = [0] * n
        for h in self.holders.values():
            ids = [b.block_id for b in h.blocks if not b.is_null]
            assert len(ids) == len(set(ids)), "a holder owns a block twice"
            for i in ids:
                refs[i] += 1
        for b in pool.blocks[1:]:
            assert b.ref_cnt == refs[b.block_id], (
                f"block {b.block_id}: ref_cnt {b.ref_cnt}, holders {refs[b.block_id]}"
            )
            assert b.block_hash == self.hash_of.get(b.block_id)
        model_map = {k: list(v) for k, v in self.cache.items()}
        pool_map = {
            k: ([v.block_id] if isinstance(v, KVCacheBlock) else list(v))
            for k, v in pool.cached_block_hash_to_block.items()
        }
        assert pool_map == model_map, "prefix-cache map differs from the model"


class _FixedData:
    """A ``st.data()`` stand-in whose only draw returns a fixed value."""

    def __init__(self, value: int) -> None:
        self.value = value

    def draw(self, strategy: object) -> int:
        return self.value


def test_block_pool_state_machine() -> None:
    """The state machine, and that it really executed the promised number of
    operations (checked here, in the same test, whatever runs the tests and where)."""
    before = OPS["count"]
    run_state_machine_as_test(BlockPoolMachine, settings=SETTINGS)
    ran = OPS["count"] - before
    assert ran >= MIN_OPS, f"only {ran} block pool operations ran"
