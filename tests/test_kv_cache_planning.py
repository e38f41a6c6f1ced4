"""Grouping and the block budget, checked against numbers vLLM 0.33.0 produced."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from kvcore.kv_cache_budget import (
    KVCacheSizing,
    generate_scheduler_kv_cache_config,
    get_max_concurrency_for_kv_cache_config,
    plan_kv_cache_budget,
)
from kvcore.kv_cache_grouping import get_kv_cache_groups
from kvcore.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)
from kvcore.kv_cache_planning import (
    InsufficientKVCacheMemoryError,
    get_kv_cache_bytes_per_block,
    get_kv_cache_configs,
    max_in_flight_tokens,
)

DATA = Path(__file__).parent / "data"
GiB = 1 << 30


def full(**kw) -> FullAttentionSpec:
    return FullAttentionSpec(**{"block_size": 16, "num_kv_heads": 8, "head_size": 128, **kw})


def swa(window: int = 1024, **kw) -> SlidingWindowSpec:
    base = {"block_size": 16, "num_kv_heads": 8, "head_size": 128, "sliding_window": window}
    return SlidingWindowSpec(**{**base, **kw})


def chunked(chunk: int = 8192) -> ChunkedLocalAttentionSpec:
    return ChunkedLocalAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                                     attention_chunk_size=chunk)  # fmt: skip


def plan(specs, memory=40 * GiB, max_model_len=8192, **kw):
    (config,) = get_kv_cache_configs([specs], [memory], max_model_len, 2048, **kw)
    return config


def test_llama2_13b_bytes_per_block():
    spec = FullAttentionSpec(block_size=16, num_kv_heads=40, head_size=128, dtype="float16")
    (group,) = get_kv_cache_groups({f"l{i}": spec for i in range(40)})
    assert get_kv_cache_bytes_per_block([group]) == 13_107_200


@pytest.mark.parametrize(
    ("sample", "num_full", "num_swa"),
    [("kvcfg_llama8b_like_40gib.json", 32, 0), ("kvcfg_hybrid_1to5_40gib.json", 8, 40)],
)
def test_reproduces_vllm_sample(sample, num_full, num_swa):
    expected = json.loads((DATA / sample).read_text())
    specs = {f"full.{i}": full() for i in range(num_full)}
    specs.update({f"swa.{i}": swa() for i in range(num_swa)})
    config = plan(specs, memory=expected["available_bytes"])
    assert config.num_blocks == expected["num_blocks"]
    groups = [
        {
            "spec": type(g.kv_cache_spec).__name__,
            "num_layers": len(g.layer_names),
            "block_size": g.kv_cache_spec.block_size,
            "page_size_bytes": g.kv_cache_spec.page_size_bytes,
            "sliding_window": g.kv_cache_spec.sliding_window,
        }
        for g in config.kv_cache_groups
    ]
    assert groups == expected["groups"]
    tensors = [{"size": t.size, "num_layers": len(t.layers)} for t in config.kv_cache_tensors]
    assert tensors == expected["kv_cache_tensors"]


def test_smaller_page_grows_its_block_size():
    specs = {"f0": full(), "f1": full(), "s0": swa(num_kv_heads=4), "s1": swa(num_kv_heads=4)}
    groups = get_kv_cache_groups(specs)
    assert [(type(g.kv_cache_spec), g.kv_cache_spec.block_size) for g in groups] == [
        (FullAttentionSpec, 16),
        (SlidingWindowSpec, 32),
    ]
    assert {g.kv_cache_spec.page_size_bytes for g in groups} == {65_536}


def test_non_dividing_page_is_padded():
    specs = {"f0": full(), "s0": swa(num_kv_heads=3)}  # 24 KiB does not divide 64 KiB
    groups = get_kv_cache_groups(specs)
    swa_spec = groups[1].kv_cache_spec
    assert (swa_spec.block_size, swa_spec.page_size_padded) == (16, 65_536)
    assert swa_spec.real_page_size_bytes == 24_576


def test_mla_page_that_cannot_unify_raises_or_falls_back():
    mla = MLAAttentionSpec(block_size=16, head_size=576)  # 18 KiB page, does not divide 64 KiB
    (mixed,) = get_kv_cache_groups({"m0": mla, "f0": full()})  # one type: no unifying
    assert isinstance(mixed.kv_cache_spec, UniformTypeKVCacheSpecs)
    with pytest.raises(NotImplementedError):
        get_kv_cache_groups({"m0": mla, "c0": chunked()})
    with pytest.raises(NotImplementedError):  # no fallback when chunked local layers exist
        get_kv_cache_groups({"m0": mla, "s0": swa(), "c0": chunked()})
    # MLA next to sliding window: one group, sliding window allocated as full attention.
    (group,) = get_kv_cache_groups({"m0": mla, "s0": swa()})
    assert isinstance(group.kv_cache_spec, UniformTypeKVCacheSpecs)
    promoted = group.kv_cache_spec.kv_cache_specs["s0"]
    assert type(promoted) is FullAttentionSpec and promoted.sliding_window == 1024


@pytest.mark.parametrize(
    ("num_full", "num_swa", "layers_per_group"),
    [
        (10, 20, [10, 10, 10]),  # group size = the smaller kind
        (13, 12, [13, 12]),  # within 1.5x: group size = the larger kind, one short group
        (8, 12, [8, 6, 6]),  # 12 is not < 1.5 * 8
        (8, 40, [8] * 6),
    ],
)
def test_group_size_rule(num_full, num_swa, layers_per_group):
    specs = {f"f{i}": full() for i in range(num_full)} | {f"s{i}": swa() for i in range(num_swa)}
    groups = get_kv_cache_groups(specs)
    assert [len(g.layer_names) for g in groups] == layers_per_group
    assert sorted(n for g in groups for n in g.layer_names) == sorted(specs)


def test_layers_are_dealt_round_robin():
    specs = {"f0": full(), "f1": full()} | {f"s{i}": swa() for i in range(4)}
    groups = get_kv_cache_groups(specs)
    assert [g.layer_names for g in groups] == [["f0", "f1"], ["s0", "s2"], ["s1", "s3"]]


def test_same_type_different_pages_is_one_uniform_group():
    specs = {"a": full(), "b": full(num_kv_heads=2), "c": full()}
    config = plan(specs, memory=GiB)
    (group,) = config.kv_cache_groups
    assert isinstance(group.kv_cache_spec, UniformTypeKVCacheSpecs)
    assert config.num_blocks == GiB // (2 * 65_536 + 16_384)
    sched = generate_scheduler_kv_cache_config([config])
    assert sched.kv_cache_groups[0].kv_cache_spec == full()


def test_disable_hybrid_manager_treats_swa_as_full():
    specs = {"f0": full()} | {f"s{i}": swa() for i in range(5)}
    config = plan(specs, disable_hybrid_kv_cache_manager=True)
    (group,) = config.kv_cache_groups
    assert type(group.kv_cache_spec) is FullAttentionSpec
    assert group.kv_cache_spec.sliding_window == 1024
    assert config.num_blocks == 40 * GiB // (6 * 65_536)


def test_min_over_tensor_parallel_workers():
    specs = {f"l{i}": full() for i in range(4)}
    configs = get_kv_cache_configs([specs, specs], [10 * GiB, 8 * GiB], 8192, 2048)
    assert [c.num_blocks for c in configs] == [8 * GiB // (4 * 65_536)] * 2
    assert configs[0].kv_cache_tensors[0].size == 8 * GiB


def test_pipeline_stages_use_their_own_layers():
    stage0 = {"f0": full(), "s0": swa(), "s1": swa()}
    stage1 = {"f1": full(), "s2": swa(), "s3": swa(), "s4": swa(), "s5": swa()}
    configs = get_kv_cache_configs([stage0, stage1], [GiB, GiB], 8192, 2048)
    # global groups (f0, f1), (s0, s3), (s1, s4), (s2, s5), projected onto each stage
    assert [g.layer_names for g in configs[0].kv_cache_groups] == [["f0"], ["s0"], ["s1"], []]
    assert [g.layer_names for g in configs[1].kv_cache_groups] == [
        ["f1"],
        ["s3"],
        ["s4"],
        ["s2", "s5"],
    ]
    # stage 1's widest group has two layers: 128 KiB per block sets everybody's budget
    assert [c.num_blocks for c in configs] == [GiB // (2 * 65_536)] * 2


def test_num_gpu_blocks_override_wins():
    specs = {f"l{i}": full() for i in range(32)}
    config = plan(specs, num_gpu_blocks_override=1000)
    assert config.num_blocks == 1000
    assert config.kv_cache_tensors[0].size == 1000 * 32 * 65_536
    with pytest.raises(InsufficientKVCacheMemoryError):
        plan(specs, num_gpu_blocks_override=512)  # 512 blocks minus the null block < 8192 tokens
    assert plan(specs, num_gpu_blocks_override=513).num_blocks == 513


def test_insufficient_memory_reports_estimate():
    specs = {f"l{i}": full() for i in range(32)}  # 2 MiB per block
    with pytest.raises(InsufficientKVCacheMemoryError) as err:
        plan(specs, memory=101 * 2 * 1024 * 1024, max_model_len=8192)
    assert err.value.estimated_max_model_len == 1600  # 100 usable blocks * 16 tokens
    assert isinstance(err.value, ValueError)


def test_max_concurrency_and_in_flight_tokens():
    config = plan({f"l{i}": full() for i in range(32)})
    assert get_max_concurrency_for_kv_cache_config(config, 8192, 2048) == 40.0
    hybrid = plan({f"f{i}": full() for i in range(8)} | {f"s{i}": swa() for i in range(40)})
    # per request: 512 full blocks + 5 groups * 193 window blocks
    assert get_max_concurrency_for_kv_cache_config(hybrid, 8192, 2048) == 81920 / (512 + 5 * 193)
    assert max_in_flight_tokens(2048) == 2048
    assert max_in_flight_tokens(2048, pipeline_parallel_size=2) == 4096
    assert max_in_flight_tokens(2048, async_scheduling=True) == 4096


def test_attention_free_model_has_only_the_null_block():
    assert plan({}).num_blocks == 1


def test_plan_kv_cache_budget():
    budget = plan_kv_cache_budget(
        available_memory_bytes=40 * GiB,
        sizing=KVCacheSizing(
            max_model_len=8192, max_num_batched_tokens=2048, tensor_parallel_size=2
        ),
        num_full_layers=8,
        num_sliding_window_layers=40,
        sliding_window=1024,
        num_kv_heads=16,
    )
    assert budget.num_blocks == 81920
    assert budget.layers_per_group == [8] * 6
    assert budget.bytes_per_block == 8 * 65_536
    assert budget.kv_cache_size_tokens == int(81920 / (512 + 5 * 193) * 8192)
    with pytest.raises(ValueError, match="sliding_window"):
        plan_kv_cache_budget(
            available_memory_bytes=GiB,
            sizing=KVCacheSizing(max_model_len=8192, max_num_batched_tokens=2048),
            num_sliding_window_layers=2,
        )
    with pytest.raises(ValueError, match="block_size"):
        plan_kv_cache_budget(
            available_memory_bytes=GiB,
            sizing=KVCacheSizing(max_model_len=8192, max_num_batched_tokens=2048, block_size=0),
            num_full_layers=2,
        )


def test_replays_vllm_oracle_cases():
    """Cases planned by vLLM 0.33.0 itself (tests/conformance/sizing_oracle.py --dump)."""
    path = Path(__file__).parent / "conformance" / "sizing_oracle.py"
    module_spec = importlib.util.spec_from_file_location("sizing_oracle", path)
    assert module_spec is not None and module_spec.loader is not None
    oracle = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(oracle)
    records = json.loads((DATA / "sizing_oracle_vllm_seed0.json").read_text())["records"]
    assert len(records) == 50
    mismatches = [r["case"]["index"] for r in records if oracle.run_kvcore(r["case"]) != r["vllm"]]
    assert mismatches == []
