"""kvcore's scheduler with the CPU offload connector (kvcore.offloading_connector):
prompt chunks are stored as they are computed, a GPU prefix-cache miss that the CPU
tier holds is loaded back while the request waits, and the connector is off unless
given. (Step-by-step agreement with vLLM 0.33.0 is checked by
tests/conformance/test_offload_differential.py.)"""

from __future__ import annotations

import pytest

from kvcore.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from kvcore.offloading_connector import OffloadingConnectorScheduler
from kvcore.request import Request
from kvcore.scheduler import Scheduler
from kvcore.scheduler_config import SchedulerConfig
from sim.conformance.offload import random_case, run_kvcore

PREFIX = list(range(1000, 1064))  # 4 blocks of 16 tokens
TRACE = [
    {
        "request_id": "r0",
        "arrival_step": 0,
        "prompt_token_ids": PREFIX + list(range(8)),
        "max_tokens": 2,
    },
    # Takes every GPU block: r0's cached blocks leave the GPU prefix cache.
    {
        "request_id": "r1",
        "arrival_step": 1,
        "prompt_token_ids": list(range(2000, 2176)),
        "max_tokens": 1,
    },
    {
        "request_id": "r2",
        "arrival_step": 3,
        "prompt_token_ids": PREFIX + list(range(50, 60)),
        "max_tokens": 1,
    },
]
CONFIG = {"num_gpu_blocks": 12, "max_num_seqs": 1, "cpu_chunks": 16}


def _steps(config: dict, trace: list[dict]) -> list[dict]:
    steps = [x for x in run_kvcore(config, trace) if x["type"] == "step"]
    for s in steps:
        s["scheduled"] = [[e["id"], e["n"]] for e in s["scheduled"]]
    return steps


def test_a_gpu_miss_held_by_the_cpu_tier_is_loaded_while_the_request_waits() -> None:
    steps = _steps(dict(CONFIG, load_latency=2, store_latency=1), TRACE)
    assert steps[0]["stores"][0][1] == "r0" and len(steps[0]["stores"][0][2]) == 4
    (load,) = [job for s in steps for job in s["loads"]]
    assert load[1] == "r2" and sorted(load[2]) == sorted(steps[0]["stores"][0][2])
    waiting = [s["step"] for s in steps if "r2" in s["waiting_for_kv"]]
    assert waiting == [3, 4]  # the load takes 2 steps; r2 runs in the next one
    first = next(s for s in steps if any(rid == "r2" for rid, _ in s["scheduled"]))
    assert first["step"] == 5 and first["scheduled"] == [["r2", 74 - 64]]
    assert steps[3]["connector_cache"] == [1, 74, 64]


def test_a_request_waits_while_its_chunks_are_still_being_written() -> None:
    """The GPU hit of an identical prompt stops one block short (the last token is
    computed again); the CPU tier has that block, but still being written: the
    request is skipped until the store is done, then loads it and computes 1 token."""
    trace = [
        {"request_id": "a", "arrival_step": 0, "prompt_token_ids": PREFIX, "max_tokens": 9},
        {"request_id": "b", "arrival_step": 1, "prompt_token_ids": PREFIX, "max_tokens": 1},
    ]
    steps = _steps(dict(CONFIG, max_num_seqs=2, load_latency=1, store_latency=6), trace)
    assert 0 in steps[5]["completed"]  # a's store, issued in step 0
    assert all(s["scheduled"] == [["a", 1]] for s in steps[1:6])  # b is held back
    (load,) = steps[6]["loads"]
    assert load[1] == "b" and len(load[2]) == 1 and steps[6]["waiting_for_kv"] == ["b"]
    assert steps[7]["scheduled"] == [["a", 1], ["b", 1]]


def test_prompt_only_offloading_stores_no_decode_chunk() -> None:
    trace = [{"request_id": "a", "arrival_step": 0, "prompt_token_ids": PREFIX, "max_tokens": 40}]
    stored = [len(j[2]) for s in _steps(dict(CONFIG), trace) for j in s["stores"]]
    assert stored == [4]
    stored = [
        len(j[2])
        for s in _steps(dict(CONFIG, offload_prompt_only=False), trace)
        for j in s["stores"]
    ]
    assert sum(stored) == (64 + 40 - 1) // 16


def test_the_connector_is_off_by_default_refuses_other_layouts_and_defers_frees_async() -> None:
    kv = KVCacheConfig(16, [], [KVCacheGroupSpec(["l0"], FullAttentionSpec(block_size=16))])
    sched = Scheduler(SchedulerConfig(max_model_len=256), kv)
    assert sched.connector is None
    sched.add_request(Request("a", list(range(40)), 2))
    assert sched.schedule().kv_connector_metadata is None
    swa = KVCacheConfig(
        16, [], [KVCacheGroupSpec(["l0"], SlidingWindowSpec(block_size=16, sliding_window=32))]
    )
    with pytest.raises(ValueError, match="full-attention"):
        OffloadingConnectorScheduler(swa, num_cpu_chunks=8)
    # With batches in flight (async scheduling) the tier's connector, a consumer,
    # defers block frees as vLLM does; synchronously it does not.
    overlapping = Scheduler(
        SchedulerConfig(max_model_len=256),
        kv,
        max_concurrent_batches=2,
        connector=OffloadingConnectorScheduler(kv, num_cpu_chunks=8),
    )
    assert overlapping.defer_block_free
    sync = Scheduler(
        SchedulerConfig(max_model_len=256),
        kv,
        connector=OffloadingConnectorScheduler(kv, num_cpu_chunks=8),
    )
    assert not sync.defer_block_free


def test_random_offload_cases_run_on_kvcore_and_keep_its_invariants() -> None:
    for i in range(15):
        config, trace = random_case(0, i)
        lines = run_kvcore(config, trace)
        assert lines[-1]["type"] == "summary"
        assert lines[-1]["free_blocks_end"] == config["num_gpu_blocks"] - 1
        last = [x for x in lines if x["type"] == "step"][-1]
        assert last["cpu"]["write_pending"] == 0 and not last["waiting_for_kv"]
