"""Speculative decoding in kvcore's scheduler: drafts scheduled, verified and rolled
back as vLLM 0.33.0 does (hand-computed cases; the randomized comparison with vLLM
itself is tests/conformance/test_spec_differential.py)."""

import pytest

from kvcore.async_scheduler import AsyncScheduler
from kvcore.batch_queue import BatchQueue
from kvcore.block_hashing import BlockHasher
from kvcore.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from kvcore.replay import ReplayConfig, replay
from kvcore.replay_trace import parse_trace
from kvcore.request import Request
from kvcore.scheduler import Scheduler
from kvcore.scheduler_config import SchedulerConfig
from kvcore.spec_decode import SpecDecodingStats, SpeculativeConfig
from kvcore.stretch_blocks import stretch_possible

BS = 16
HASHER = BlockHasher.from_name(BS, "sha256")


def make(method="ngram", k=3, num_blocks=64, cls=Scheduler, enable_caching=True, **cfg):
    cfg.setdefault("max_model_len", 1024)
    cfg.setdefault("max_num_batched_tokens", 256)
    cfg.setdefault("max_num_seqs", 8)
    kv = KVCacheConfig(num_blocks, [], [KVCacheGroupSpec(["l"], FullAttentionSpec(block_size=BS))])
    spec = SpeculativeConfig(method, k) if k else None
    return cls(SchedulerConfig(**cfg), kv, enable_caching=enable_caching, speculative_config=spec)


def add(s, rid, n, max_tokens=20, base=0):
    r = Request(rid, [base + i for i in range(n)], max_tokens, block_hasher=HASHER)
    s.add_request(r)
    return r


def sync_step(s, accepted=None, drafts=None):
    """One synchronous step; ``accepted`` drafts per request id, then ``drafts``
    proposed (a count per request id) for the next step."""
    out = s.schedule()
    sampled = {}
    for rid in out.num_scheduled_tokens:
        if not s.requests[rid].is_prefill_chunk:
            sampled[rid] = [7] * (1 + (accepted or {}).get(rid, 0))
    res = s.update_from_output(out, sampled)
    if drafts:
        s.update_draft_token_ids({rid: [7] * n for rid, n in drafts.items()})
    s.check_invariants()
    return out, res


def test_drafts_are_scheduled_with_the_next_token_and_rejections_roll_back():
    s = make(k=3)
    a = add(s, "a", 20)
    sync_step(s, drafts={"a": 3})  # prefill samples one token; 3 drafts proposed
    assert a.num_computed_tokens == 20 and a.num_tokens == 21 and a.spec_token_ids == [7] * 3
    out, res = sync_step(s, accepted={"a": 1})
    assert out.num_scheduled_tokens == {"a": 4}
    assert out.scheduled_spec_decode_tokens == {"a": [7, 7, 7]}
    # 1 of 3 accepted: 2 tokens appended, 2 rejected slots rolled back.
    assert a.num_tokens == 23 and a.num_computed_tokens == 22
    stats = res.spec_decoding_stats
    assert (stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens) == (1, 3, 1)
    assert stats.num_accepted_tokens_per_pos == [1, 0, 0]
    assert a.spec_token_ids == []  # drafts are used once


def test_drafts_after_a_prefill_chunk_are_dropped():
    s = make(k=2, max_num_batched_tokens=16, max_num_seqs=4)
    a = add(s, "a", 40)
    sync_step(s, drafts={"a": 2})
    assert a.is_prefill_chunk and a.spec_token_ids == []


def test_a_one_token_admission_is_padded_to_one_plus_k():
    """vLLM pads a waiting request with one token left (here a fully cached prompt)
    to 1 + k tokens with placeholder drafts, when a running request is scheduled."""
    s = make(k=2)
    add(s, "a", 33, base=0)
    sync_step(s)  # a's prefill caches two full blocks
    add(s, "b", 33, base=0)  # the same prompt: 32 tokens cached, one left
    out, res = sync_step(s, accepted={"b": 0})
    assert out.num_scheduled_tokens["b"] == 3
    assert out.scheduled_spec_decode_tokens["b"] == [-1, -1]
    assert s.requests["b"].num_computed_tokens == 33  # both placeholders rejected


def test_draft_model_sets_aside_an_input_slot_per_request_and_lookahead_blocks():
    s = make("draft_model", k=3, max_num_batched_tokens=24, max_num_seqs=4)
    assert s.num_lookahead_tokens == 3 and s.draft_slots == 1
    add(s, "a", 30)
    out, _ = sync_step(s)
    # The input budget is 24 tokens less 1 drafting slot for the request.
    assert out.num_scheduled_tokens == {"a": 23}


def test_skip_drafts_when_no_request_can_use_them():
    s = make("draft_model", k=2)
    add(s, "a", 10, max_tokens=1)
    out, _ = sync_step(s)
    assert out.skip_drafts  # its only token ends it
    s = make("draft_model", k=2)
    add(s, "a", 10, max_tokens=5)
    out, _ = sync_step(s)
    assert not out.skip_drafts
    s = make("ngram", k=2)  # no forward pass of its own: never skipped
    add(s, "a", 10, max_tokens=1)
    assert not sync_step(s)[0].skip_drafts


def test_async_placeholders_cover_the_drafts_in_flight():
    s = make(k=2, cls=AsyncScheduler)
    a = add(s, "a", 20, max_tokens=50)
    queue = BatchQueue(s, lambda sch, out: {rid: [7] for rid in out.num_scheduled_tokens})
    queue.schedule_next()  # prefill: one placeholder, two placeholder drafts
    assert a.num_output_placeholders == 1 and a.spec_token_ids == [-1, -1]
    batch, _ = queue.schedule_next()
    assert batch.scheduler_output.num_scheduled_tokens == {"a": 3}
    assert a.num_output_placeholders == 1 + 3
    queue.apply_oldest()  # the prefill's token
    queue.apply_oldest()  # 1 token: both drafts rejected, placeholders resolved
    assert a.num_output_placeholders == 0
    assert a.num_tokens == 22 and a.num_computed_tokens == 21


def test_bad_configurations_are_refused():
    with pytest.raises(ValueError, match="not modelled"):
        SpeculativeConfig("mtp", 3)
    with pytest.raises(ValueError, match="allowed: ngram, ngram_gpu, draft_model, eagle"):
        SpeculativeConfig("medusa", 3)
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        SpeculativeConfig("ngram", 0)
    with pytest.raises(ValueError, match="lookahead"):
        make("draft_model", k=8, max_num_batched_tokens=8, max_num_seqs=8)


def test_fast_forward_steps_one_by_one_with_speculative_decoding():
    s = make(k=2)
    add(s, "a", 10, max_tokens=50)
    sync_step(s)
    assert not stretch_possible(s)
    s = make(k=0)
    add(s, "a", 10, max_tokens=50)
    sync_step(s)
    assert stretch_possible(s)


def test_stats_merge_and_replay_is_deterministic():
    a, b = SpecDecodingStats.new(2), SpecDecodingStats.new(2)
    a.observe_draft(2, 1)
    b.observe_draft(2, 2)
    m = a.merged(b)
    assert (m.num_drafts, m.num_accepted_tokens, m.num_accepted_tokens_per_pos) == (2, 3, [2, 1])
    trace = parse_trace(
        [
            {"request_id": f"r{i}", "arrival_step": i, "prompt_token_ids": list(range(i, i + 40))}
            | {"max_tokens": 12}
            for i in range(6)
        ]
    )
    for async_scheduling in (False, True):
        config = ReplayConfig(
            num_gpu_blocks=64,
            num_speculative_tokens=3,
            async_scheduling=async_scheduling,
            max_num_batched_tokens=64,
            max_num_seqs=8,
        )
        first, second = list(replay(trace, config)), list(replay(trace, config))
        assert first == second
        steps = [x for x in first if x["type"] == "step"]
        accepted = sum((x["spec_decoding"] or {}).get("num_accepted_tokens", 0) for x in steps)
        assert accepted > 0
        # Fewer steps than one token per step would take.
        assert len(steps) < 6 * 12


def test_eagle_block_hashes_cover_the_next_token():
    """With EAGLE and prefix caching a block's hash includes the token after it
    (vLLM's lookahead block hashes), so it exists only once that token does."""
    from kvcore.block_hashing import make_none_hash, sha256

    s = make("eagle3", k=2)
    assert s.num_lookahead_tokens == 2 and s.num_hash_lookahead_tokens == 1
    assert s.draft_slots == 0 and s.can_skip_drafts
    hasher = BlockHasher.from_name(BS, "sha256", num_lookahead_tokens=1)
    r = Request("a", list(range(32)), 4, block_hasher=hasher)
    assert len(r.block_hashes) == 1  # token 32 does not exist yet
    none = make_none_hash(sha256)
    assert r.block_hashes[0] == sha256((none, tuple(range(16)), (None, 16)))
    r.append_output_token_id(99)
    assert len(r.block_hashes) == 2
    assert r.block_hashes[1] == sha256((r.block_hashes[0], tuple(range(16, 32)), (None, 99)))
    with pytest.raises(ValueError, match="cover 0 tokens"):
        s.add_request(Request("b", list(range(32)), 4, block_hasher=HASHER))
    s.add_request(Request("c", list(range(32)), 4, block_hasher=hasher))
    assert make("eagle3", k=2, enable_caching=False).num_hash_lookahead_tokens == 0
