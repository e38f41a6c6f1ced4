"""The CPU offload tier's manager (kvcore.cpu_offload_manager): capacity, chunk life
cycle and LRU eviction order, as vLLM 0.33.0's CPUOffloadingManager + LRUCachePolicy.
(The same behaviour is compared with vLLM itself in
tests/conformance/test_offload_differential.py.)"""

from __future__ import annotations

from kvcore.cpu_offload_manager import (
    CPUOffloadingManager,
    LookupResult,
    OffloadReqContext,
    cpu_offload_num_chunks,
    make_offload_key,
)

GiB = 1 << 30


def test_capacity_is_bytes_over_page_aligned_chunk_bytes() -> None:
    # Llama-3-8B-like: 32 layers x 2 (K, V) x 8 heads x 128 x 16 tokens x 2 bytes.
    per_block = 32 * 2 * 8 * 128 * 16 * 2
    assert cpu_offload_num_chunks(10 * GiB, per_block) == 10 * GiB // per_block == 5120
    # TP 2: each worker holds half the heads; a chunk holds both workers' halves.
    assert cpu_offload_num_chunks(10 * GiB, per_block // 2, world_size=2) == 5120
    assert cpu_offload_num_chunks(10 * GiB, per_block, blocks_per_chunk=4) == 1280
    # A chunk is padded to whole 4 KiB pages.
    assert cpu_offload_num_chunks(GiB, 6000) == GiB // 8192
    assert cpu_offload_num_chunks(GiB, 0) == 0


def _keys(n: int, group: int = 0) -> list[bytes]:
    return [make_offload_key(bytes([i]) * 32, group) for i in range(1, n + 1)]


def _ctx(rid: str, keys: list[bytes], tokens_per_chunk: int = 16) -> OffloadReqContext:
    ctx = OffloadReqContext(rid)
    for i, k in enumerate(keys):
        ctx.set_offload_key_position(k, (i + 1) * tokens_per_chunk)
    return ctx


def test_a_chunk_is_readable_once_its_store_completes_and_pinned_while_loading() -> None:
    m = CPUOffloadingManager(2)
    k1, k2, k3 = _keys(3)
    a = _ctx("a", [k1, k2, k3])
    out = m.prepare_store([k1, k2], a)
    assert out is not None and out.keys_to_store == [k1, k2] and out.chunk_ids == [0, 1]
    assert m.lookup(k1) is LookupResult.HIT_PENDING and m.lookup(k3) is LookupResult.MISS
    assert m.prepare_store([k3], a) is None  # nothing evictable while writes are pending
    m.complete_store([k1, k2])
    assert m.lookup(k1) is LookupResult.HIT and m.num_evictable_chunks == 2
    assert m.prepare_load([k1], _ctx("b", [k1])) == [0]
    out = m.prepare_store([k3], a)  # k1 is pinned by the load: k2 goes
    assert out is not None and out.evicted_keys == [k2] and out.chunk_ids == [1]
    m.complete_load([k1])
    assert m.num_evictable_chunks == 1 and m.num_write_pending_chunks == 1


def test_an_offer_of_held_chunks_stores_only_the_new_ones() -> None:
    m = CPUOffloadingManager(4)
    k1, k2 = _keys(2)
    a = _ctx("a", [k1, k2])
    m.prepare_store([k1], a)
    m.complete_store([k1])
    out = m.prepare_store([k1, k2], a)
    assert out is not None and out.keys_to_store == [k2]


def test_a_failed_store_frees_its_chunk() -> None:
    m = CPUOffloadingManager(1)
    (k1,) = _keys(1)
    m.prepare_store([k1], _ctx("a", [k1]))
    m.complete_store([k1], success=False)
    assert m.lookup(k1) is LookupResult.MISS and m.num_free_chunks() == 1


def test_lru_evicts_a_requests_tail_first_and_a_reader_refreshes_a_chunk() -> None:
    m = CPUOffloadingManager(3)
    k1, k2, k3 = _keys(3)
    a = _ctx("a", [k1, k2, k3])
    m.prepare_store([k1, k2, k3], a)
    m.complete_store([k1, k2, k3])
    m.on_request_finished(a)
    # Tail first: k3 has the oldest rank after the request's recency is committed.
    assert [k for _, k in sorted((r, k) for k, r in m.policy.ranks.items())] == [k3, k2, k1]
    # A later request reading k3 makes it newer than the rest of a's chunks.
    b = _ctx("b", [k1, k2, k3])
    m.prepare_load([k3], b)
    m.complete_load([k3])
    (x,) = _keys(1, group=1)
    out = m.prepare_store([x], _ctx("c", [x]))
    assert out is not None and out.evicted_keys == [k2]
