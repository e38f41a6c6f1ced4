"""kvsim's KV block budget against 59 real vLLM 0.19 start-ups on H100-80GB
(tests/data/llmd_memory): the accuracy reached stays reached, rows kvsim cannot express
say why, and each budget term re-derived against the measurements is pinned by a test
that fails if it reverts."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from rich.console import Console

from calibrate.budget_terms import (
    FORWARD_HIDDEN_BUFFERS,
    activation_peak_bytes,
    default_non_torch_bytes,
    forward_peak_bytes,
    moe_workspace_bytes,
    rope_cache_bytes,
    sampler_peak_bytes,
)
from calibrate.catalog import load_gpu, load_model
from calibrate.gpu_spec import GIB
from calibrate.hf_config import model_spec_from_hf_config
from sim.validate.memory import MemoryValidation, memory_table, validate_memory

DATA = Path(__file__).parent / "data" / "llmd_memory"


@pytest.fixture(scope="module")
def validation() -> MemoryValidation:
    return validate_memory(DATA / "results_raw.csv", DATA / "configs")


def test_block_budget_matches_vllm_startups(validation):
    """Reached: 51 expressible rows, median |error| 0.04%, max 1.45% (Qwen2.5-72B at TP2,
    which leaves only 3 GiB of KV cache). Before the re-derivation: 42 rows, median
    1.85%, max 55.6%. The bounds leave a little room above what is reached
    so that a real regression, not a rounding, fails."""
    assert validation.count >= 51
    assert validation.median_abs_error_pct <= 0.25
    assert validation.max_abs_error_pct <= 2.0
    within_1pct = [r for r in validation.rows if r.error_pct is not None and abs(r.error_pct) <= 1]
    assert len(within_1pct) >= 48  # the rest: Gemma-3-27B, the 72B models at TP2 (3 GiB of KV)


def test_one_row_per_successful_startup_and_skips_say_why(validation):
    with (DATA / "results_raw.csv").open(encoding="utf-8", newline="") as f:
        ok = [r for r in csv.DictReader(f) if r["status"] == "ok"]
    assert len(validation.rows) == len(ok) == 59
    assert validation.count + len(validation.skipped) == 59
    reasons = {r.model: r.skipped for r in validation.skipped}
    assert "pipeline parallel" in reasons["meta-llama/Llama-3.1-8B-Instruct"]
    assert "architecture" in reasons["microsoft/phi-2"]
    assert "quantization mxfp4" in reasons["openai/gpt-oss-20b"]
    assert "no config.json" in reasons["meta-llama/Llama-4-Scout-17B-16E-Instruct"]
    for r in validation.rows:
        assert (r.skipped is None) == (r.kvsim is not None) == (r.error_pct is not None)


def test_gpu_total_matches_the_dataset():
    """The dataset's H100-80GB reports 79.19 GiB in total."""
    with (DATA / "results_raw.csv").open(encoding="utf-8", newline="") as f:
        totals = {t for r in csv.DictReader(f) if (t := r["init_total_memory_gib"])}
    assert totals == {"79.19"}
    assert load_gpu("H100-SXM").memory_bytes / GIB == pytest.approx(79.19, abs=0.005)


def test_terms_track_the_measured_ones(validation):
    """Term by term on the dense bf16 rows: weights within 0.1 GiB, activation within
    0.1 GiB, non-torch within 0.1 GiB (0.25 GiB alone, 2.1 GiB with TP)."""
    dense = [
        r
        for r in validation.rows
        if r.kvsim is not None
        and r.model.startswith(("meta-llama/", "Qwen/Qwen2.5-7B", "Qwen/Qwen3-8B", "microsoft/"))
    ]
    assert len(dense) >= 20
    for r in dense:
        assert r.kvsim.weights == pytest.approx(r.measured.weights, abs=0.1), r
        assert r.kvsim.activation == pytest.approx(r.measured.activation, abs=0.1), r
        assert r.kvsim.non_torch == pytest.approx(r.measured.non_torch, abs=0.1), r


def test_table_renders_every_row(validation):
    console = Console(width=400, record=True)
    console.print(memory_table(validation))
    text = console.export_text()
    assert "median |error| 0.0" in text
    assert text.count("skipped:") == len(validation.skipped)
    assert "Qwen/Qwen3-8B" in text


def test_activation_is_the_larger_of_forward_and_sampler():
    """vLLM frees the forward's intermediates before the dummy sampler run: the peak is
    their max, not their sum (the sum overestimated Llama-3.1-8B by 0.85 GiB)."""
    m = load_model("Llama-3.1-8B")
    forward = forward_peak_bytes(m, 1, 8192)
    sampler = sampler_peak_bytes(m, 8192, 1024)
    assert activation_peak_bytes(m, 1, 8192, 1024) == max(forward, sampler) == sampler
    assert forward == 2 * (FORWARD_HIDDEN_BUFFERS * 4096 + 3 * 14336) * 8192
    assert sampler == 2 * 4096 * 8192 + 1024 * 128_256 * (2 + 13)
    assert activation_peak_bytes(m, 1, 8192, 0) == forward  # no requests: forward alone
    # the sampler's logits are whole on every rank: tensor parallelism leaves it as is
    assert activation_peak_bytes(m, 4, 8192, 1024) == sampler
    code = model_spec_from_hf_config(_config("codellama--CodeLlama-7b-hf"), "CodeLlama-7b")
    assert activation_peak_bytes(code, 1, 8192, 1024) == forward_peak_bytes(code, 1, 8192)


def test_moe_workspaces_stay_allocated_through_the_sampler():
    """vLLM's workspace manager keeps the fused-MoE workspaces after the forward: they
    add to the sampler's peak (Mixtral-8x7B at TP2 measured 1.21 GiB: 0.51 of sampler,
    0.70 of workspaces)."""
    m = model_spec_from_hf_config(_config("mistralai--Mixtral-8x7B-Instruct-v0.1"), "mixtral")
    ws = moe_workspace_bytes(m, 2, 8192)
    assert ws == 2 * 8192 * (2 * 7168 + 2 * 14336 + 4096)
    assert activation_peak_bytes(m, 2, 8192, 1024) == sampler_peak_bytes(m, 8192, 1024) + ws
    assert activation_peak_bytes(m, 2, 8192, 1024) / GIB == pytest.approx(1.21, abs=0.05)
    assert moe_workspace_bytes(load_model("Llama-3.1-8B"), 1, 8192) == 0


def test_non_torch_term_alone_and_with_tensor_parallelism():
    assert default_non_torch_bytes(1) == GIB // 4
    assert default_non_torch_bytes(2) == default_non_torch_bytes(8) == 17 * GIB // 8


def test_rope_cache_counts_with_the_weights():
    llama = load_model("Llama-3.1-8B")
    assert rope_cache_bytes(llama) == 131_072 * 128 * 2
    gemma = model_spec_from_hf_config(_config("google--gemma-3-12b-it"), "gemma-3-12b")
    # linear scaling x8 for the global rope, plus the local rope of the sliding layers
    assert rope_cache_bytes(gemma) == (8 + 1) * 131_072 * 256 * 2


def test_gemma2_alternates_sliding_and_global_layers():
    m = model_spec_from_hf_config(_config("google--gemma-2-9b-it"), "gemma-2-9b")
    assert m.layer_kinds[:4] == ("sliding_window", "full", "sliding_window", "full")
    assert m.num_layers_of("full") == m.num_layers_of("sliding_window") == 21


@pytest.mark.parametrize(
    ("name", "field", "value", "weights_gib"),
    [
        ("RedHatAI--Meta-Llama-3.1-8B-Instruct-quantized.w8a8", "weight_dtype", "int8", 8.49),
        ("RedHatAI--Qwen2.5-7B-Instruct-fp8-dynamic", "weight_dtype", "fp8", 8.14),
        ("RedHatAI--Meta-Llama-3.1-8B-Instruct-quantized.w4a16", "weight_bits", 4, 5.38),
    ],
)
def test_quantized_checkpoints_count_their_weight_bytes(name, field, value, weights_gib):
    """Against the weight memory vLLM measured for the checkpoint (GiB)."""
    m = model_spec_from_hf_config(_config(name), name)
    assert getattr(m, field) == value
    measured = weights_gib * GIB
    assert m.weight_bytes() + rope_cache_bytes(m) == pytest.approx(measured, rel=0.015)


def _config(stem: str) -> dict:
    import json

    return json.loads((DATA / "configs" / f"{stem}.json").read_text(encoding="utf-8"))
