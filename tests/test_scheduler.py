"""V1 Scheduler behaviour: budgets, preemption victims, admission, stops."""

import pytest

from kvcore.block_hashing import BlockHasher
from kvcore.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from kvcore.request import Request, RequestStatus
from kvcore.scheduler import Scheduler
from kvcore.scheduler_config import SchedulerConfig

BS = 16


def make(num_blocks=64, **cfg):
    cfg.setdefault("max_model_len", 1024)
    cfg.setdefault("max_num_batched_tokens", 256)
    cfg.setdefault("max_num_seqs", 8)
    kv = KVCacheConfig(num_blocks, [], [KVCacheGroupSpec(["l"], FullAttentionSpec(block_size=BS))])
    return Scheduler(SchedulerConfig(**cfg), kv)


HASHER = BlockHasher.from_name(BS, "sha256")


def add(s, rid, n, max_tokens=4, priority=0, arrival=0.0, base=None):
    base = hash(rid) % 10000 * 1000 if base is None else base
    r = Request(
        rid,
        [base + i for i in range(n)],
        max_tokens,
        arrival_time=arrival,
        priority=priority,
        block_hasher=HASHER,
    )
    s.add_request(r)
    return r


def step(s):
    out = s.schedule()
    sampled = {rid: [7] for rid in out.num_scheduled_tokens if not s.requests[rid].is_prefill_chunk}
    res = s.update_from_output(out, sampled)
    s.check_invariants()
    return out, res


def test_chunked_prefill_splits_by_budget_and_samples_only_after_prefill():
    s = make(max_num_batched_tokens=100)
    a = add(s, "a", 150)
    out, res = step(s)
    assert out.num_scheduled_tokens == {"a": 100} and a.num_output_tokens == 0
    out, res = step(s)
    assert out.num_scheduled_tokens == {"a": 50} and a.num_output_tokens == 1


def test_no_chunked_prefill_is_head_of_line():
    s = make(max_num_batched_tokens=200, enable_chunked_prefill=False, max_model_len=200)
    add(s, "a", 150, base=0)
    add(s, "b", 100, base=5000)
    add(s, "c", 10, base=9000)
    out, _ = step(s)
    assert list(out.num_scheduled_tokens) == ["a"]  # b does not fit; c waits behind it


def test_long_prefill_threshold_ignored_with_single_request():
    s = make(long_prefill_token_threshold=32)
    add(s, "a", 100)
    out, _ = step(s)
    assert out.num_scheduled_tokens["a"] == 100
    s2 = make(long_prefill_token_threshold=32)
    add(s2, "a", 100, base=0)
    add(s2, "b", 100, base=5000)
    out, _ = step(s2)
    assert out.num_scheduled_tokens == {"a": 32, "b": 32}


def test_max_num_seqs_limits_admissions():
    s = make(max_num_seqs=2)
    for i in range(4):
        add(s, f"r{i}", 10)
    out, _ = step(s)
    assert len(out.num_scheduled_tokens) == 2 and len(s.waiting) == 2


def test_fcfs_preempts_last_admitted_and_admits_nothing_that_step():
    s = make(num_blocks=9, max_model_len=200)  # 8 usable blocks
    a = add(s, "a", 60, max_tokens=100, base=0)  # 4 blocks
    b = add(s, "b", 60, max_tokens=100, base=5000)  # 4 blocks
    step(s)
    add(s, "c", 5, base=9000)
    preempted = []
    for _ in range(10):
        out, _ = step(s)
        if out.preempted_req_ids:
            preempted.append(set(out.preempted_req_ids))
            assert "c" not in out.num_scheduled_tokens  # no admission in a preempting step
            break
    assert preempted == [{"b"}]
    assert b.status == RequestStatus.PREEMPTED and b.num_computed_tokens == 0
    assert b.num_preemptions == 1 and s.waiting.peek_request() is b  # front of the queue
    assert a.status == RequestStatus.RUNNING


def test_priority_preempts_least_important_latest_arrival():
    s = make(num_blocks=9, max_model_len=200, policy="priority")
    add(s, "hi", 60, max_tokens=100, priority=0, arrival=0.0, base=0)
    add(s, "lo", 60, max_tokens=100, priority=5, arrival=0.0, base=5000)
    step(s)
    for _ in range(10):
        out, _ = step(s)
        if out.preempted_req_ids:
            break
    assert out.preempted_req_ids == {"lo"}
    assert "hi" in out.num_scheduled_tokens


def test_priority_queue_orders_waiting_requests():
    s = make(policy="priority", max_num_seqs=1)
    add(s, "late", 10, priority=1, arrival=0.0)
    add(s, "urgent", 10, priority=0, arrival=1.0)
    out, _ = step(s)
    assert list(out.num_scheduled_tokens) == ["urgent"]


def test_stops_on_max_tokens_and_max_model_len():
    s = make(max_model_len=40)
    a = add(s, "a", 10, max_tokens=3, base=0)
    b = add(s, "b", 35, max_tokens=100, base=5000)
    finished = []
    for _ in range(20):
        _, res = step(s)
        finished += res.finished_req_ids
        if not s.has_requests():
            break
    assert a.num_output_tokens == 3 and a.status == RequestStatus.FINISHED_LENGTH_CAPPED
    assert b.num_tokens == 40 and b.is_finished()
    assert set(finished) == {"a", "b"}
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == 63


def test_eos_and_stop_tokens_stop_early():
    s = make()
    r = Request("a", [1, 2, 3], 50, eos_token_id=7, block_hasher=HASHER)
    s.add_request(r)
    step(s)
    assert r.status == RequestStatus.FINISHED_STOPPED and r.num_output_tokens == 1


def test_preempted_request_resumes_on_its_own_cached_blocks():
    s = make(num_blocks=10, max_model_len=200)
    add(s, "a", 60, max_tokens=50, base=0)
    b = add(s, "b", 60, max_tokens=30, base=5000)
    resumed_hit = None
    for _ in range(200):
        out, res = step(s)
        if "b" in out.scheduled_resumed_reqs:
            resumed_hit = b.num_computed_tokens - out.num_scheduled_tokens["b"]
        if not s.has_requests():
            break
    assert b.num_preemptions >= 1 and resumed_hit is not None and resumed_hit > 0


def test_duplicate_request_id_rejected_and_abort():
    s = make()
    add(s, "a", 10)
    with pytest.raises(ValueError):
        add(s, "a", 10)
    step(s)
    s.finish_requests(["a"], RequestStatus.FINISHED_ABORTED)
    assert not s.running and s.kv_cache_manager.block_pool.get_num_free_blocks() == 63


def test_finish_requests_aborts_running_and_waiting_once():
    """vLLM's finish_requests: unknown and finished ids skipped, running and waiting
    requests removed and freed, ids reported in the next step, a repeat is a no-op."""
    s = make(max_num_seqs=1)
    a, b = add(s, "a", 40), add(s, "b", 20)
    step(s)  # a runs, b waits (one running request at most)
    assert a.status == RequestStatus.RUNNING and b.status == RequestStatus.WAITING
    ended = s.finish_requests(["b", "nope", "a", "b"], RequestStatus.FINISHED_ABORTED)
    assert ended == [b, a]
    assert a.status == b.status == RequestStatus.FINISHED_ABORTED
    assert not s.running and not s.waiting and not s.requests
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == 63
    assert s.has_requests()  # the aborted ids still go out in the next step
    out = s.schedule()
    assert out.finished_req_ids == {"a", "b"} and out.total_num_scheduled_tokens == 0
    assert s.finish_requests("a", RequestStatus.FINISHED_ABORTED) == []
    c = add(s, "c", 5)
    assert s.finish_requests(None, RequestStatus.FINISHED_ABORTED) == [c]


def test_lookahead_reserves_slots_each_step():
    s = make(num_lookahead_tokens=4)
    add(s, "a", 14)
    out, _ = step(s)
    assert out.get_new_block_ids("a") == ([1, 2],)  # 14 + 4 slots -> 2 blocks
