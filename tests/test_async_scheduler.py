"""kvcore's AsyncScheduler and BatchQueue: the async engine loop, step by step.

Exact agreement with vLLM 0.33.0 on random traces is the conformance suite's job
(tests/conformance); these tests pin down, without vLLM, the timeline the batch queue
implies for one request, the stale output of a request preempted with tokens in
flight, and that the batch queue of size 1 is the synchronous loop.
"""

from __future__ import annotations

import pytest

from kvcore.async_scheduler import BATCH_QUEUE_SIZE, AsyncScheduler
from kvcore.batch_queue import BatchQueue, sample_fixed_token
from kvcore.block_hashing import BlockHasher
from kvcore.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from kvcore.replay import ReplayConfig, build_scheduler, replay
from kvcore.replay_trace import load_trace, parse_trace
from kvcore.request import Request, RequestStatus
from kvcore.scheduler_config import SchedulerConfig


def _steps(trace, **knobs):
    return [x for x in replay(parse_trace(trace), ReplayConfig(**knobs)) if x["type"] == "step"]


def test_batch_queue_size_is_vllms():
    """vLLM 0.33.0: max_concurrent_batches is 2 with async scheduling and one stage."""
    assert BATCH_QUEUE_SIZE == 2
    with pytest.raises(ValueError, match="batch_queue_size"):
        BatchQueue(build_scheduler(ReplayConfig(), 8), sample_fixed_token(7), 0)


def test_isolated_request_timeline_sync_and_async():
    """One request, 20 prompt tokens, max_tokens 3, nothing else running.

    Synchronous: step 0 computes the prompt and samples token 1, steps 1 and 2 tokens 2
    and 3; step 2 finishes it; step 3 (empty) reports the finish, then the loop ends.

    Async (batch queue of 2): step 0 schedules the prompt and returns without waiting.
    Step 1 schedules decode 1 with a placeholder for token 1, then (queue full) applies
    step 0: token 1 arrives one step later than in the synchronous loop. Step 2
    schedules decode 2 and applies step 1 (token 2). Step 3 schedules nothing for the
    request: computed + 2 - placeholders = 22 + 2 - 1 = 23 = prompt + max_tokens, so
    step 2's batch already samples the last token (max_model_len 64 leaves room, so
    only this placeholder check holds it back); step 3 applies it (token 3, finish).
    Steps 4 and 5 drain the queue (an empty batch carrying the finish report).
    """
    trace = [{"request_id": "a", "arrival_step": 0, "prompt_token_ids": [1] * 20, "max_tokens": 3}]
    sync = _steps(trace, num_gpu_blocks=16)
    assert [[e["n"] for e in s["scheduled"]] for s in sync] == [[20], [1], [1], []]
    assert [s["finished"] for s in sync] == [[], [], ["a"], []]

    steps = _steps(trace, num_gpu_blocks=16, max_model_len=64, async_scheduling=True)
    assert [[e["n"] for e in s["scheduled"]] for s in steps] == [[20], [1], [1], [], [], []]
    assert [s["applied_step"] for s in steps] == [None, 0, 1, 2, 3, 4]
    assert [s["new_tokens"] for s in steps] == [[], ["a"], ["a"], ["a"], [], []]
    assert [s["finished"] for s in steps] == [[], [], [], ["a"], [], []]
    assert [s["in_flight"] for s in steps] == [[0], [1], [2], [3], [4], []]
    # after step 1: token 1 applied (21 tokens), decode 1 in flight (one placeholder)
    assert {k: steps[1]["scheduled"][0][k] for k in ("computed_after", "num_tokens")} == {
        "computed_after": 21,
        "num_tokens": 21,
    }
    assert steps[1]["scheduled"][0]["placeholders"] == 1
    first_token = {"sync": 0, "async": 1}  # the step whose end delivers token 1
    assert sync[first_token["sync"]]["scheduled"][0]["sampled"]
    assert steps[first_token["async"]]["new_tokens"] == ["a"]


def _small_async(num_blocks: int, queue_size: int) -> tuple[AsyncScheduler, BatchQueue]:
    config = SchedulerConfig(max_model_len=64, max_num_batched_tokens=64, max_num_seqs=4)
    kv = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer.0"], FullAttentionSpec(block_size=4))],
    )
    scheduler = AsyncScheduler(config, kv, enable_caching=False, max_concurrent_batches=queue_size)
    return scheduler, BatchQueue(scheduler, sample_fixed_token(7), queue_size)


def test_preempted_request_gets_its_stale_output_and_waits_for_it():
    """r3 is preempted in step 2 while step 1 (its prompt, sampling a token) is in
    flight. That output is stale: it still appends the token, but leaves the reset
    counters (computed 0, no placeholders) alone. With three batches in flight (a
    queue of 3, as pipeline parallelism would need) step 1 is still in flight when
    step 3 schedules, so r3, first in the waiting queue, is passed over and r1, behind
    it, is admitted; r3 stays first. (With vLLM's queue of 2 the stale output is
    always back before the next schedule.) Everything finishes with all its tokens."""
    scheduler, queue = _small_async(num_blocks=7, queue_size=3)
    spec = [("r0", 1, 6, 11), ("r1", 3, 2, 11), ("r2", 0, 8, 6), ("r3", 1, 4, 9)]
    reqs: dict[str, Request] = {}
    results = []
    for step in range(200):
        for rid, arrival, prompt_len, max_tokens in spec:
            if arrival == step:
                reqs[rid] = Request(rid, list(range(1, prompt_len + 1)), max_tokens, step)
                scheduler.add_request(reqs[rid])
        if step > 3 and not queue.has_work():
            break
        waiting_head = scheduler.waiting.peek_request() if scheduler.waiting else None
        results.append((waiting_head, queue.step()))
        scheduler.check_invariants()
        if step == 2:
            r3 = reqs["r3"]
            assert results[2][1].scheduled.scheduler_output.preempted_req_ids == {"r3"}
            assert r3.status == RequestStatus.PREEMPTED and r3.num_stale_output_tokens == 4
            assert (r3.num_computed_tokens, r3.num_output_placeholders, r3.num_tokens) == (0, 0, 4)
        if step == 3:
            head, it = results[3]
            assert head is reqs["r3"]
            assert it.scheduled.scheduler_output.scheduled_new_reqs == ["r1"]
            assert it.applied.step == 1 and "r3" in it.output.new_token_ids
            r3 = reqs["r3"]
            assert r3.num_stale_output_tokens == 0 and r3.num_output_tokens == 1
            assert (r3.num_computed_tokens, r3.num_output_placeholders) == (0, 0)
            assert scheduler.waiting.peek_request() is r3
    assert not queue.has_work()
    for rid, _, _, max_tokens in spec:
        assert reqs[rid].is_finished() and reqs[rid].output_token_ids == [7] * max_tokens
    pool = scheduler.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == pool.num_gpu_blocks - 1


def test_queue_of_one_is_the_synchronous_loop(data_dir):
    """BatchQueue(size 1) over the synchronous Scheduler makes the decisions of
    kvcore's synchronous replay (itself equal to vLLM's samples), step for step."""
    trace = load_trace(data_dir / "trace_shared_prefix.json")
    config = ReplayConfig(num_gpu_blocks=30, max_num_seqs=8, max_num_batched_tokens=256)
    lines = [x for x in replay(trace, config) if x["type"] == "step"]
    scheduler = build_scheduler(config, max(len(r.prompt_token_ids) + r.max_tokens for r in trace))
    queue = BatchQueue(scheduler, sample_fixed_token(7), batch_queue_size=1)
    hasher = BlockHasher.from_name(16, "sha256", config.none_hash_seed)
    order = sorted(trace, key=lambda r: r.arrival_step)
    got, nxt, step = [], 0, 0
    while True:
        while nxt < len(order) and order[nxt].arrival_step <= step:
            r = order[nxt]
            arrival = r.arrival_step + nxt * 1e-9
            scheduler.add_request(
                Request(
                    r.request_id, r.prompt_token_ids, r.max_tokens, arrival, block_hasher=hasher
                )
            )
            nxt += 1
        if nxt == len(order) and not queue.has_work():
            break
        it = queue.step()
        assert it.applied is it.scheduled  # applied in the step that scheduled it
        out = it.scheduled.scheduler_output if it.scheduled else None
        got.append(
            {
                "n": dict(out.num_scheduled_tokens) if out else {},
                "finished": it.output.finished_req_ids if it.output else [],
            }
        )
        step += 1
    want = [
        {"n": {e["id"]: e["n"] for e in s["scheduled"]}, "finished": s["finished"]} for s in lines
    ]
    assert got == want
