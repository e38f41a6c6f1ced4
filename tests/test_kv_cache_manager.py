"""KVCacheManager: vLLM 0.33.0's op-level samples, admission rules and stats."""

import json

import pytest

from kvcore.block_hashing import BlockHasher
from kvcore.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from kvcore.kv_cache_manager import KVCacheManager
from kvcore.request import Request, RequestStatus
from sim.conformance.ops import run_ops


def make_manager(num_blocks, groups=("full",), window=32, block_size=16, **kw):
    specs = {
        "full": FullAttentionSpec(block_size=block_size),
        "sliding": SlidingWindowSpec(block_size=block_size, sliding_window=window),
    }
    cfg = KVCacheConfig(
        num_blocks, [], [KVCacheGroupSpec([f"l{i}"], specs[g]) for i, g in enumerate(groups)]
    )
    kw.setdefault("max_model_len", 8192)
    return KVCacheManager(cfg, enable_caching=kw.pop("enable_caching", True), **kw)


@pytest.mark.parametrize(
    "sample,groups",
    [("ops_example.jsonl", ["full"]), ("ops_example_hybrid_swa32.jsonl", ["full", "sliding"])],
)
def test_reproduces_vllm_op_samples(data_dir, sample, groups):
    ops = json.loads((data_dir / "ops_example.json").read_text())
    expected = [json.loads(line) for line in (data_dir / sample).open()]
    header = expected[0]
    config = {
        "num_gpu_blocks": header["num_gpu_blocks"],
        "kv_groups": groups,
        "sliding_window": 32,
        "enable_kv_cache_events": "kv_events" in expected[1],
    }
    got = list(run_ops(ops, config, check_invariants=True))
    want = expected[1:]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g == w, f"op {w.get('i')} ({w.get('op')}) differs"


def test_seed_scenario_shared_prefix_hits_exactly_two_blocks():
    """A (48) gets 3 blocks, B (80) 5; A finishes after 16 outputs; C shares A's
    first 32 tokens, hits exactly 2 blocks and allocates only the rest."""
    manager = make_manager(100)
    hasher = BlockHasher.from_name(16, "sha256")
    a = Request("A", list(range(48)), 16, block_hasher=hasher)
    b = Request("B", list(range(1000, 1080)), 16, block_hasher=hasher)
    assert len(manager.allocate_slots(a, 48).blocks[0]) == 3
    a.num_computed_tokens = 48
    assert len(manager.allocate_slots(b, 80).blocks[0]) == 5
    for _ in range(16):  # decode 16 tokens: one more block at token 49
        a.append_output_token_ids(7)
        manager.allocate_slots(a, 1)
        a.num_computed_tokens += 1
    manager.free(a)
    c = Request("C", list(range(32)) + list(range(5000, 5030)), 8, block_hasher=hasher)
    blocks, hit = manager.get_computed_blocks(c)
    assert hit == 32 and len(blocks.blocks[0]) == 2
    a_ids = [1, 2, 3]  # A's first blocks
    assert [blk.block_id for blk in blocks.blocks[0]] == a_ids[:2]
    free_before = manager.block_pool.get_num_free_blocks()
    new = manager.allocate_slots(c, 62 - 32, num_new_computed_tokens=32, new_computed_blocks=blocks)
    assert len(new.blocks[0]) == 2  # tokens 32..61: two more blocks
    assert manager.block_pool.get_num_free_blocks() == free_before - 2 - 2  # 2 hits + 2 new
    manager.check_invariants()


@pytest.mark.parametrize("length,hit", [(145, 144), (144, 128), (16, 0), (17, 16)])
def test_last_token_is_never_a_hit(length, hit):
    manager = make_manager(64)
    hasher = BlockHasher.from_name(16, "sha256")
    first = Request("x", list(range(length)), 1, block_hasher=hasher)
    manager.allocate_slots(first, length)
    again = Request("y", list(range(length)), 1, block_hasher=hasher)
    assert manager.get_computed_blocks(again)[1] == hit


def test_skip_reading_prefix_cache_and_caching_off():
    hasher = BlockHasher.from_name(16, "sha256")
    manager = make_manager(64)
    manager.allocate_slots(Request("x", list(range(64)), 1, block_hasher=hasher), 64)
    skip = Request("y", list(range(64)), 1, block_hasher=hasher, skip_reading_prefix_cache=True)
    assert manager.get_computed_blocks(skip)[1] == 0
    off = make_manager(64, enable_caching=False)
    off.allocate_slots(Request("x", list(range(64)), 1, block_hasher=hasher), 64)
    assert off.get_computed_blocks(Request("y", list(range(64)), 1, block_hasher=hasher))[1] == 0
    assert not any(b.block_hash for b in off.block_pool.blocks)


def test_allocation_failure_returns_none_without_state_change():
    manager = make_manager(5)  # 4 usable blocks
    hasher = BlockHasher.from_name(16, "sha256")
    big = Request("x", list(range(80)), 1, block_hasher=hasher)
    assert manager.allocate_slots(big, 80) is None
    assert manager.block_pool.get_num_free_blocks() == 4
    manager.check_invariants()


def test_full_sequence_must_fit_and_watermark():
    hasher = BlockHasher.from_name(16, "sha256")
    manager = make_manager(11, watermark=0.2)  # 10 usable, watermark int(0.2*11)=2 blocks
    r = Request("x", list(range(128)), 1, block_hasher=hasher)  # 8 blocks
    # Only the first chunk (1 block) fits the free count, but the whole prompt must.
    assert (
        manager.allocate_slots(r, 16, full_sequence_must_fit=True, has_scheduled_reqs=False)
        is not None
    )
    manager.free(r)
    r2 = Request("y", list(range(200, 344)), 1, block_hasher=hasher)  # 9 blocks
    assert (
        manager.allocate_slots(r2, 16, full_sequence_must_fit=True, has_scheduled_reqs=True) is None
    )  # 9 + 2 > 10
    assert (
        manager.allocate_slots(r2, 16, full_sequence_must_fit=True, has_scheduled_reqs=False)
        is not None
    )
    r3 = Request("z", list(range(500, 516)), 1, block_hasher=hasher)
    r3.status = RequestStatus.RUNNING  # the watermark only gates waiting requests
    assert manager.allocate_slots(r3, 16, has_scheduled_reqs=True) is not None


def test_lookahead_slots_are_allocated():
    manager = make_manager(64)
    r = Request("x", list(range(16)), 4, block_hasher=BlockHasher.from_name(16, "sha256"))
    new = manager.allocate_slots(r, 16, num_lookahead_tokens=3)
    assert len(new.blocks[0]) == 2


def test_prefix_cache_stats_per_admission_and_preempted_apart():
    manager = make_manager(64)
    hasher = BlockHasher.from_name(16, "sha256")
    r = Request("x", list(range(40)), 1, block_hasher=hasher)
    manager.record_prefix_cache_stats(r, 32)
    r.num_preemptions = 1
    manager.record_prefix_cache_stats(r, 16)
    stats = manager.make_prefix_cache_stats()
    assert (stats.requests, stats.queries, stats.hits) == (1, 40, 32)
    assert (stats.preempted_requests, stats.preempted_queries, stats.preempted_hits) == (1, 40, 16)
    again = manager.make_prefix_cache_stats()
    assert (again.requests, again.preempted_requests) == (0, 0)


def test_allocate_zero_tokens_is_a_caller_bug():
    manager = make_manager(8)
    with pytest.raises(ValueError):
        manager.allocate_slots(Request("x", [1, 2], 1), 0)


def test_prefix_cache_stats_merge_every_counter():
    from kvcore.kv_cache_manager import PrefixCacheStats

    a, b = PrefixCacheStats(), PrefixCacheStats()
    a.record(100, 32, preempted=False)
    b.record(50, 16, preempted=True)
    b.record(10, 0, preempted=False)
    m = a.merged(b)
    assert (m.requests, m.queries, m.hits) == (2, 110, 32)
    assert (m.preempted_requests, m.preempted_queries, m.preempted_hits) == (1, 50, 16)
    assert (a.requests, b.requests) == (1, 1)  # neither side changed
