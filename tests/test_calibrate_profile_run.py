"""profile_run's vLLM 0.33 accounting: block counts for vLLM's sample configs and the
catalog models (analytic memory backend, no torch), and the real CPU runner path."""

from __future__ import annotations

import dataclasses
import json

import pytest

from calibrate.budget import KVBudgetError, compute_kv_budget
from calibrate.budget_terms import rope_cache_bytes
from calibrate.catalog import load_gpu, load_model
from calibrate.gpu_spec import GIB
from calibrate.harness.memory_backend import AnalyticMemoryBackend
from calibrate.model_spec import ModelSpec
from calibrate.profile_run import ProfileConfig, profile_run


def _spec_from_kvcfg(cfg: dict) -> ModelSpec:
    """A bf16 model whose layers give the sample's groups (8 KV heads x 128 = 64 KiB pages)."""
    kinds: list[str] = []
    window = None
    for g in cfg["groups"]:
        kind = "full" if g["spec"] == "FullAttentionSpec" else "sliding_window"
        window = g["sliding_window"] or window
        kinds += [kind] * g["num_layers"]
    return ModelSpec(
        name="sample", num_layers=len(kinds), hidden_size=1024, intermediate_size=2048,
        num_attention_heads=32, num_kv_heads=8, head_size=128, vocab_size=1000,
        max_position_embeddings=8192, layer_types=tuple(kinds), sliding_window=window,
    )  # fmt: skip


@pytest.mark.parametrize("name", ["kvcfg_llama8b_like_40gib", "kvcfg_hybrid_1to5_40gib"])
def test_reproduces_vllm_num_blocks(data_dir, name):
    cfg = json.loads((data_dir / f"{name}.json").read_text())
    spec = _spec_from_kvcfg(cfg)
    for g in cfg["groups"]:
        assert g["page_size_bytes"] == 16 * 8 * 256 * 2
    pcfg = ProfileConfig(
        gpu_memory_utilization=1.0, max_num_batched_tokens=2048, max_num_seqs=256,
        max_model_len=8192, cudagraph_bytes=0,
    )  # fmt: skip
    probe = profile_run(spec, pcfg, AnalyticMemoryBackend(100 * GIB))
    # choose the device size so that exactly the sample's bytes are left for the KV cache
    total = cfg["available_bytes"] + probe.non_kv_cache_bytes
    result = profile_run(spec, pcfg, AnalyticMemoryBackend(total))
    assert result.available_kv_bytes == cfg["available_bytes"]
    assert result.num_gpu_blocks == cfg["num_blocks"]
    assert result.num_kv_cache_groups == len(cfg["groups"])


CASES = [
    ("Llama-3.1-8B", "H100-SXM", 1, None),
    ("Gemma-3-27B", "H100-SXM", 1, 65536),
    ("DeepSeek-V3", "H200", 8, None),
    ("Llama-3.1-70B", "H100-SXM", 2, 8192),
    ("Llama-3.1-70B", "H100-SXM", 4, None),
]


@pytest.mark.parametrize(("model", "gpu", "tp", "max_len"), CASES)
def test_matches_budget_module(model, gpu, tp, max_len):
    spec, hw = load_model(model), load_gpu(gpu)
    b = compute_kv_budget(spec, hw, tensor_parallel_size=tp, max_model_len=max_len)
    cfg = ProfileConfig(
        max_num_batched_tokens=b.max_num_batched_tokens, max_num_seqs=b.max_num_seqs,
        max_model_len=b.max_model_len, tensor_parallel_size=tp,
        cudagraph_bytes=b.cudagraph_bytes,
    )  # fmt: skip
    r = profile_run(spec, cfg, AnalyticMemoryBackend(hw.memory_bytes))
    assert r.num_gpu_blocks == b.num_gpu_blocks > 0
    assert r.available_kv_bytes == b.available_kv_bytes
    assert r.weights_bytes == b.weights_bytes
    assert r.num_kv_cache_groups == b.num_kv_cache_groups
    assert r.non_kv_cache_bytes == r.total_consumed_bytes + r.transient_peak_headroom_bytes
    assert r.available_kv_bytes == (
        r.requested_memory_bytes - r.non_kv_cache_bytes - r.cudagraph_bytes
    )
    if model == "Gemma-3-27B":
        assert r.num_kv_cache_groups == 7  # 1 full + 6 sliding groups of 10 layers


def test_tp_shrinks_per_rank_weights():
    spec, hw = load_model("Llama-3.1-70B"), load_gpu("H100-SXM")
    rs = [
        profile_run(spec, ProfileConfig(max_model_len=8192, tensor_parallel_size=tp),
                    AnalyticMemoryBackend(hw.memory_bytes))
        for tp in (2, 4)
    ]  # fmt: skip
    rope = rope_cache_bytes(spec)  # replicated on every rank
    assert rs[0].weights_bytes - rope == 2 * (rs[1].weights_bytes - rope)
    assert rs[1].num_gpu_blocks > rs[0].num_gpu_blocks


def test_cpu_runner_path_counts_real_parameters():
    torch = pytest.importorskip("torch", reason="torch not installed (calibrate extra)")
    from calibrate.harness.measure import TINY_MODEL
    from calibrate.harness.torch_runner import TorchRunner

    torch.set_num_threads(1)
    spec = load_model("Llama-3.1-8B")
    small = spec.model_copy(update={"hidden_size": 128, "intermediate_size": 256,
                                    "num_attention_heads": 4, "num_kv_heads": 2,
                                    "head_size": 32, "vocab_size": 512,
                                    "dtype": "float32"})  # fmt: skip
    runner = TorchRunner(small, num_layers=2)
    cfg = ProfileConfig(max_num_batched_tokens=256, max_num_seqs=16, max_model_len=8192)
    r = profile_run(small, cfg, AnalyticMemoryBackend(8 * GIB), runner)
    assert r.profiled_num_layers == 2 and r.num_layers == 32
    # 2 layers measured (fp32 parameters of the real model) + 30 extrapolated
    assert r.weights_bytes == small.weight_bytes() and r.missing_layer_bytes > 0
    assert r.num_gpu_blocks > 0 and TINY_MODEL.num_layers == 2


def test_both_refuse_a_request_the_async_loop_cannot_hold():
    """Gemma 3 27B at its 131,072 tokens on one H100: with async scheduling (vLLM
    0.33.0's default) its sliding-window layers hold a second step's tokens too, and
    one such request no longer fits; the synchronous loop's budget holds it."""
    spec, hw = load_model("Gemma-3-27B"), load_gpu("H100-SXM")
    with pytest.raises(KVBudgetError, match="max_model_len"):
        compute_kv_budget(spec, hw)
    sync = compute_kv_budget(spec, hw, async_scheduling=False)
    cfg = ProfileConfig(
        max_num_batched_tokens=sync.max_num_batched_tokens, max_num_seqs=sync.max_num_seqs,
        max_model_len=sync.max_model_len, cudagraph_bytes=sync.cudagraph_bytes,
    )  # fmt: skip
    with pytest.raises(ValueError):
        profile_run(spec, cfg, AnalyticMemoryBackend(hw.memory_bytes))
    sync_cfg = dataclasses.replace(cfg, async_scheduling=False)
    result = profile_run(spec, sync_cfg, AnalyticMemoryBackend(hw.memory_bytes))
    assert result.num_gpu_blocks == sync.num_gpu_blocks
