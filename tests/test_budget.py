"""The default KV budget: terms add up, kvcore's planner sizes the blocks, vLLM's
defaults and a real vLLM run are reproduced, and impossible configurations name the knob."""

from __future__ import annotations

import math

import pytest

from calibrate.budget import KVBudgetError, compute_kv_budget
from calibrate.budget_limits import default_batch_limits
from calibrate.budget_terms import (
    CUDAGRAPH_BYTES,
    NON_TORCH_BYTES,
    activation_peak_bytes,
    rope_cache_bytes,
)
from calibrate.catalog import list_gpus, list_models, load_gpu, load_model

MIB = 1 << 20


def budget(model="Llama-3.1-8B", gpu="H100-SXM", **kwargs):
    return compute_kv_budget(load_model(model), load_gpu(gpu), **kwargs)


def test_terms_sum_to_requested_memory():
    b = budget(gpu_memory_utilization=0.9)
    assert b.requested_memory_bytes == math.ceil(b.total_memory_bytes * 0.9)
    assert b.requested_memory_bytes == (
        b.weights_bytes
        + b.activation_peak_bytes
        + b.non_torch_bytes
        + b.cudagraph_bytes
        + b.available_kv_bytes
    )
    assert b.num_gpu_blocks == b.available_kv_bytes // b.bytes_per_block
    assert b.kv_cache_config.num_blocks == b.num_gpu_blocks


def test_llama8b_h100_at_0_9_is_plausible():
    """Expected 27,284 blocks (436,544 tokens), derived by hand:
    requested ceil(85,029,158,912 x 0.9) = 76,526,243,021 B; weights 2 B x 8,030,261,248
    = 16,060,522,496 plus the rotary cos/sin cache 131,072 x 128 x 2 B = 33,554,432;
    activation peak at vLLM 0.33's H100 defaults (8192 batched tokens, 1024 seqs): the
    larger of the forward 2 B x (4 x 4096 + 3 x 14336) x 8192 = 973,078,528 and the
    sampler 2 B x 4096 x 8192 + (2 + 13) B x 1024 x 128,256 = 2,037,121,024; non-torch
    0.25 GiB; CUDA graphs 27/32 GiB; leaves 57,220,639,949 B over 2 MiB per block (32
    layers x 16 tokens x 8 heads x 256 x 2 B) = 27,284. The vLLM 0.19 start-up of
    Llama-3.1-8B-Instruct on an H100 at 0.95 measured the same weights (14.99 GiB),
    activation (1.89 GiB) and non-torch (0.25 GiB) terms (tests/data/llmd_memory)."""
    b = budget(gpu_memory_utilization=0.9)
    assert (b.max_num_batched_tokens, b.max_num_seqs) == (8192, 1024)
    assert b.weights_bytes == 16_094_076_928
    assert b.activation_peak_bytes == 2_037_121_024
    assert b.bytes_per_block == 2 * MIB
    assert b.num_gpu_blocks == 27_284
    assert b.kv_cache_size_tokens == 27_284 * 16
    assert b.max_concurrency == pytest.approx(27_284 / (131_072 / 16))


def test_vllm_0_19_on_rtx4090_within_what_the_h100_terms_explain():
    """The RTX 4090 run of vLLM 0.19 (LLMServingSim bench data) reported 2588 blocks
    (41,408 tokens) at 0.9, 2048 batched tokens, 256 seqs, max_model_len 32768; 0.19 did
    not subtract a CUDA-graph estimate. kvsim gives 2791 (+7.8%): its terms, which
    reproduce the H100 start-ups to a median 0.04%, leave 0.40 GiB of that run's
    non-KV memory unexplained (weights 14.99 GiB as on the H100; activation 0.47 GiB at
    256 requests; non-torch 0.25 GiB). Guarded here so it does not drift further."""
    b = budget(
        gpu="RTX-4090",
        gpu_memory_utilization=0.9,
        max_model_len=32768,
        max_num_batched_tokens=2048,
        max_num_seqs=256,
        cudagraph_memory_bytes=0,
    )
    assert b.num_gpu_blocks == pytest.approx(2588, rel=0.08)


def test_vllm_default_batch_limits():
    assert default_batch_limits(load_gpu("H100-SXM")) == (8192, 1024)
    assert default_batch_limits(load_gpu("H200")) == (8192, 1024)
    assert default_batch_limits(load_gpu("B200")) == (16384, 1024)
    assert default_batch_limits(load_gpu("MI300X")) == (16384, 1024)
    assert default_batch_limits(load_gpu("A100-80GB")) == (2048, 256)
    assert default_batch_limits(load_gpu("L40S")) == (2048, 256)


def test_more_batched_tokens_fewer_blocks():
    small = budget(max_num_batched_tokens=2048, max_num_seqs=256)
    large = budget(max_num_batched_tokens=16384, max_num_seqs=256)
    assert large.activation_peak_bytes > small.activation_peak_bytes
    assert large.num_gpu_blocks < small.num_gpu_blocks


def test_fp8_kv_cache_doubles_blocks():
    auto = budget()
    fp8 = budget(kv_cache_dtype="fp8")
    assert fp8.bytes_per_block * 2 == auto.bytes_per_block
    assert fp8.num_gpu_blocks == auto.available_kv_bytes // fp8.bytes_per_block


def test_tensor_parallel_splits_weights_and_heads():
    one = budget("Llama-3.1-70B", "H200", tensor_parallel_size=2)
    four = budget("Llama-3.1-70B", "H200", tensor_parallel_size=4)
    rope = rope_cache_bytes(load_model("Llama-3.1-70B"))  # replicated on every rank
    assert (four.weights_bytes - rope) * 2 == pytest.approx(one.weights_bytes - rope, abs=2)
    assert four.bytes_per_block * 2 == one.bytes_per_block
    assert four.non_torch_bytes > NON_TORCH_BYTES
    assert four.num_gpu_blocks > 2 * one.num_gpu_blocks


def test_hybrid_and_mla_models_use_kvcore_grouping():
    gemma = budget("Gemma-3-27B", "H200")
    assert gemma.num_kv_cache_groups == 7  # 1 full + 6 sliding groups of 10 layers
    assert gemma.bytes_per_block == 10 * 16 * 16 * 256 * 2
    ds = budget("DeepSeek-V3", "H200", tensor_parallel_size=8)
    assert ds.bytes_per_block == 61 * 16 * 576 * 2


def test_override_and_reserve_knobs():
    b = budget(num_gpu_blocks_override=10_000)
    assert b.num_gpu_blocks == 10_000 and b.num_gpu_blocks_override == 10_000
    with pytest.raises(KVBudgetError, match="num_gpu_blocks_override.*max-model-len"):
        budget(num_gpu_blocks_override=1000)  # 16,000 tokens < one 131,072-token request
    eager = budget(cudagraph_memory_bytes=0)
    assert eager.cudagraph_bytes == 0 and budget().cudagraph_bytes == CUDAGRAPH_BYTES
    assert eager.num_gpu_blocks > budget().num_gpu_blocks


def test_activation_estimate_moe_uses_experts():
    ds = load_model("DeepSeek-V3")
    dense = load_model("Llama-3.1-70B")
    assert activation_peak_bytes(ds, 8, 8192, 256) > 0
    assert activation_peak_bytes(dense, 1, 4096, 256) > activation_peak_bytes(dense, 1, 2048, 256)


@pytest.mark.parametrize("model", list_models())
def test_every_model_fits_somewhere(model):
    sizes = [
        compute_kv_budget(load_model(model), load_gpu(g), tensor_parallel_size=8)
        for g in ("H200", "B200")
    ]
    assert all(b.num_gpu_blocks > 0 for b in sizes)
    assert len(list_gpus()) >= 7


@pytest.mark.parametrize(
    ("kwargs", "knob"),
    [
        ({"model": "Llama-3.1-70B"}, "--tensor-parallel-size"),
        ({"gpu": "L40S", "gpu_memory_utilization": 0.5}, "--max-model-len"),
        ({"gpu_memory_utilization": -0.1}, "gpu_memory_utilization"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size"),
        ({"tensor_parallel_size": 3}, "tensor_parallel_size"),
        ({"block_size": 0}, "block_size"),
        ({"kv_cache_dtype": "int3"}, "kv_cache_dtype"),
        ({"max_model_len": 10**7}, "max_model_len"),
        ({"max_num_batched_tokens": 128, "max_num_seqs": 256}, "max_num_batched_tokens"),
        ({"max_num_seqs": -1}, "max_num_seqs"),
    ],
)
def test_bad_configurations_name_the_knob(kwargs, knob):
    with pytest.raises(KVBudgetError, match=knob):
        budget(**kwargs)


def test_async_scheduling_default_keeps_a_second_step_in_flight():
    # vLLM 0.33.0 runs async scheduling by default: two steps' tokens are in flight
    # (max_in_flight_tokens), which Gemma 3's sliding-window layers must also hold.
    kwargs = {"model": "Gemma-3-27B", "max_model_len": 32768}
    default = budget(**kwargs)
    sync = budget(**kwargs, async_scheduling=False)
    assert default.max_concurrency == budget(**kwargs, async_scheduling=True).max_concurrency
    assert default.num_gpu_blocks == sync.num_gpu_blocks
    assert default.max_concurrency < sync.max_concurrency
    # Full-attention layers hold max_model_len whatever is in flight.
    llama = {"max_model_len": 32768}
    assert (
        budget(**llama).max_concurrency == budget(**llama, async_scheduling=False).max_concurrency
    )
