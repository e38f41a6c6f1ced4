"""kvsim replay reproduces vLLM 0.33.0's own step-by-step output on its samples
(``async_*``: vLLM's AsyncScheduler behind its engine core's batch queue of 2)."""

import json

import pytest

from kvcore.replay import ReplayConfig, replay
from kvcore.replay_trace import TraceError, load_trace, parse_trace

SAMPLES = {
    "shared_prefix": {},
    "preempt": {"dump_block_tables": True},
    "nochunk": {},
    "longprefill64": {},
    "nocache": {},
    "hybrid_swa64": {
        "kv_groups": ("full", "sliding_window"),
        "sliding_window": 64,
        "enable_kv_cache_events": True,
    },
    "async_preempt": {"dump_block_tables": True, "async_scheduling": True},
    "async_hybrid_swa64": {
        "kv_groups": ("full", "sliding_window"),
        "sliding_window": 64,
        "enable_kv_cache_events": True,
        "async_scheduling": True,
    },
}


def config_from_header(header, extra):
    c = header["config"]
    keys = (
        "block_size",
        "num_gpu_blocks",
        "enable_prefix_caching",
        "prefix_caching_hash_algo",
        "max_num_seqs",
        "max_num_batched_tokens",
        "enable_chunked_prefill",
        "long_prefill_token_threshold",
        "policy",
        "watermark",
        "scheduler_reserve_full_isl",
        "max_model_len",
    )
    return ReplayConfig(
        **{k: c[k] for k in keys},
        sample_token_id=header["sample_token_id"],
        none_hash_seed=header["none_hash_seed"],
        **extra,
    )


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_replay_matches_vllm_sample_line_for_line(data_dir, name):
    ref = [json.loads(line) for line in (data_dir / f"steps_{name}.jsonl").open()]
    trace = load_trace(data_dir / "trace_shared_prefix.json")
    got = list(replay(trace, config_from_header(ref[0], SAMPLES[name])))
    assert got[0]["none_hash"] == ref[0]["none_hash"]
    assert got[0]["config"]["coordinator"] == ref[0]["config"]["coordinator"]
    assert got[0]["config"]["managers"] == ref[0]["config"]["managers"]
    ref_steps = [r for r in ref if r["type"] == "step"]
    got_steps = [r for r in got if r["type"] == "step"]
    for want, have in zip(ref_steps, got_steps):
        assert have == want, f"first difference at step {want['step']}"
    assert len(got_steps) == len(ref_steps)
    timing = {"wall_s", "sched_loop_s", "steps_per_s"}
    assert got[-1] == {k: v for k, v in ref[-1].items() if k not in timing}


def test_replay_is_deterministic(data_dir):
    trace = load_trace(data_dir / "trace_shared_prefix.json")
    cfg = ReplayConfig(
        num_gpu_blocks=40,
        max_num_seqs=8,
        max_num_batched_tokens=256,
        prefix_caching_hash_algo="xxhash",
        enable_kv_cache_events=True,
    )
    assert list(replay(trace, cfg)) == list(replay(trace, cfg))


def test_arrival_order_and_idle_steps():
    trace = parse_trace(
        [
            {
                "request_id": "late",
                "arrival_step": 3,
                "prompt_token_ids": [1, 2, 3],
                "max_tokens": 1,
            },
            {"request_id": "early", "arrival_step": 0, "prompt_token_ids": [4, 5], "max_tokens": 1},
        ]
    )
    lines = list(replay(trace, ReplayConfig(num_gpu_blocks=8)))
    steps = [x for x in lines if x["type"] == "step"]
    assert [s["scheduled"][0]["id"] if s["scheduled"] else None for s in steps] == [
        "early",
        None,
        None,
        "late",
        None,
    ]  # the last step reports the finish
    assert steps[0]["finished"] == ["early"]


@pytest.mark.parametrize(
    "bad,field",
    [
        ({"arrival_step": 0, "prompt_token_ids": [1], "max_tokens": 1}, "request_id"),
        (
            {"request_id": "a", "arrival_step": -1, "prompt_token_ids": [1], "max_tokens": 1},
            "arrival_step",
        ),
        (
            {"request_id": "a", "arrival_step": 0, "prompt_token_ids": [], "max_tokens": 1},
            "prompt_token_ids",
        ),
        (
            {"request_id": "a", "arrival_step": 0, "prompt_token_ids": [1], "max_tokens": 0},
            "max_tokens",
        ),
        (
            {
                "request_id": "a",
                "arrival_step": 0,
                "prompt_token_ids": [1],
                "max_tokens": 1,
                "colour": 1,
            },
            "colour",
        ),
        (
            {
                "request_id": "a",
                "arrival_step": 0,
                "prompt_token_ids": [1],
                "max_tokens": 1,
                "lora_id": "x",
            },
            "lora_id",
        ),
    ],
)
def test_malformed_trace_names_the_field(bad, field):
    with pytest.raises(TraceError, match=field):
        parse_trace([bad], "t.json")


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"block_size": 0}, "block_size"),
        ({"prefix_caching_hash_algo": "md5"}, "prefix_caching_hash_algo"),
        ({"kv_groups": ("full", "mamba")}, "kv_groups"),
        ({"kv_groups": ("full", "sliding_window")}, "sliding_window"),
        ({"watermark": 1.5}, "watermark"),
        ({"policy": "lifo", "max_model_len": 64}, "policy"),
    ],
)
def test_impossible_knobs_name_the_field(kwargs, field):
    trace = parse_trace(
        [{"request_id": "a", "arrival_step": 0, "prompt_token_ids": [1, 2], "max_tokens": 4}]
    )
    with pytest.raises(ValueError, match=field):
        list(replay(trace, ReplayConfig(**kwargs)))


def test_prompt_longer_than_max_model_len_is_rejected():
    trace = parse_trace(
        [{"request_id": "a", "arrival_step": 0, "prompt_token_ids": [1] * 10, "max_tokens": 4}]
    )
    with pytest.raises(ValueError, match="max_model_len"):
        list(replay(trace, ReplayConfig(max_model_len=10)))
