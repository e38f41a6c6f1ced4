"""The GPU and model catalog: every entry loads, published figures come out, user files
(Hugging Face config.json, GPU YAML) load, and bad input raises CatalogError naming the
file and field."""

from __future__ import annotations

import json

import pytest

from calibrate.catalog import CatalogError, list_gpus, list_models, load_gpu, load_model
from kvcore.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec

GPUS = ["A100-40GB", "A100-80GB", "H100-SXM", "H200", "L40S", "B200", "MI300X"]
MODELS = [
    "Llama-3.1-8B",
    "Llama-3.1-70B",
    "Qwen2.5-7B",
    "Qwen2.5-72B",
    "Mistral-7B",
    "Gemma-3-27B",
    "DeepSeek-V3",
]


def test_catalog_lists_required_entries():
    assert set(GPUS) <= set(list_gpus())
    assert set(MODELS) <= set(list_models())


@pytest.mark.parametrize("name", sorted(set(GPUS) | set(list_gpus())))
def test_every_gpu_loads_with_sane_figures(name):
    gpu = load_gpu(name)
    assert gpu.name == name and gpu.source
    assert 0.9 < gpu.memory_bytes / (gpu.memory_gb * 1e9) < 1.1
    assert gpu.peak_flops("bfloat16") > 1e14 and gpu.hbm_bandwidth_bytes_per_s > 5e11


@pytest.mark.parametrize("name", MODELS)
def test_every_model_loads(name):
    model = load_model(name)
    assert model.name == name and len(model.layer_kinds) == model.num_layers
    assert model.weight_bytes() > 1e9


# Published parameter counts (model cards), in billions; our count from config shapes.
@pytest.mark.parametrize(
    ("name", "total", "active"),
    [
        ("Llama-3.1-8B", 8.030, 8.030),
        ("Llama-3.1-70B", 70.55, 70.55),
        ("Qwen2.5-7B", 7.62, 7.62),
        ("Qwen2.5-72B", 72.7, 72.7),
        ("Mistral-7B", 7.25, 7.25),
        ("DeepSeek-V3", 671.0, 37.0),
    ],
)
def test_param_counts_match_model_cards(name, total, active):
    counts = load_model(name).param_counts()
    assert counts.total / 1e9 == pytest.approx(total, rel=0.01)
    assert counts.active_per_token / 1e9 == pytest.approx(active, rel=0.02)


def test_llama_8b_exact_params_and_kv():
    m = load_model("llama-3.1-8b")  # case-insensitive
    assert m.total_params == 8_030_261_248
    assert m.weight_bytes() == 2 * 8_030_261_248
    assert m.kv_bytes_per_token() == 131_072  # 32 layers x 2 x 8 heads x 128 x 2 B
    assert load_model("meta-llama/Llama-3.1-8B").name == "Llama-3.1-8B"


def test_gemma3_sliding_window_pattern():
    m = load_model("Gemma-3-27B")
    kinds = m.layer_kinds
    assert kinds.count("full") == 10 and kinds.count("sliding_window") == 52
    assert [i + 1 for i, k in enumerate(kinds) if k == "full"] == list(range(6, 61, 6))
    assert m.sliding_window == 1024 and m.tie_word_embeddings
    specs = m.kv_layer_specs(block_size=16)
    assert sum(isinstance(s, SlidingWindowSpec) for s in specs.values()) == 52
    assert all(s.page_size_bytes == 16 * 16 * 256 * 2 for s in specs.values())


def test_deepseek_v3_mla_and_moe():
    m = load_model("DeepSeek-V3")
    assert set(m.layer_kinds) == {"mla"} and m.mla_kv_size == 576
    assert m.num_experts == 256 and m.num_experts_per_tok == 8 and m.num_moe_layers == 58
    assert m.weight_dtype == "fp8"
    assert m.kv_bytes_per_token() == 61 * 576 * 2
    specs = m.kv_layer_specs(block_size=16, tp=8)
    assert all(
        isinstance(s, MLAAttentionSpec) and s.page_size_bytes == 18_432 for s in specs.values()
    )
    assert m.weight_bytes("bfloat16") > 1.9 * m.weight_bytes()


def test_kv_layer_specs_split_heads_over_tp():
    specs = load_model("Llama-3.1-70B").kv_layer_specs(block_size=16, kv_cache_dtype="fp8", tp=4)
    spec = next(iter(specs.values()))
    assert isinstance(spec, FullAttentionSpec) and spec.num_kv_heads == 2
    assert spec.page_size_bytes == 2 * 16 * 2 * 128 * 1


def _write_config(tmp_path, **overrides):
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 512,
        "intermediate_size": 1024,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "num_hidden_layers": 4,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
        "torch_dtype": "float16",
        "some_unknown_key": {"ignored": True},
    }
    cfg.update(overrides)
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_hf_config_path_loads(tmp_path):
    path = _write_config(tmp_path)
    m = load_model(str(path))
    assert m.name == "tiny-llama" and m.dtype == "float16" and m.head_size == 64
    assert m.num_kv_heads == 2 and m.layer_kinds == ("full",) * 4
    assert load_model(path.parent).num_layers == 4  # the folder works too
    assert m.kv_bytes_per_token() == 4 * 2 * 2 * 64 * 2


def test_hf_config_sliding_window_all_layers(tmp_path):
    m = load_model(_write_config(tmp_path, sliding_window=256))
    assert m.layer_kinds == ("sliding_window",) * 4 and m.sliding_window == 256


def test_hf_config_missing_field_names_file_and_field(tmp_path):
    path = _write_config(tmp_path)
    raw = json.loads(path.read_text())
    del raw["hidden_size"]
    path.write_text(json.dumps(raw))
    with pytest.raises(CatalogError, match=r"config\.json.*hidden_size"):
        load_model(path)


def test_hf_config_bad_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(CatalogError, match="not valid JSON"):
        load_model(path)


def test_unknown_names_list_known_ones():
    with pytest.raises(CatalogError, match="known: .*Llama-3.1-8B"):
        load_model("Llama-9")
    with pytest.raises(CatalogError, match="known: .*H100-SXM"):
        load_gpu("H900")
    with pytest.raises(CatalogError, match="not found"):
        load_gpu("missing/gpu.yaml")


GPU_YAML = """name: Test-GPU
memory_gb: 16
memory_bytes: 16000000000
bf16_tflops: 100
fp16_tflops: 100
hbm_bandwidth_gbps: 500
interconnect_bandwidth_gbps: 32
source: test
"""


def test_gpu_yaml_path_loads(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text(GPU_YAML)
    gpu = load_gpu(str(path))
    assert gpu.name == "Test-GPU" and gpu.fp8_tflops is None
    assert gpu.peak_flops("fp8") == 100e12


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (GPU_YAML + "colour: green\n", "colour"),
        (
            GPU_YAML.replace("hbm_bandwidth_gbps: 500", "hbm_bandwidth_gbps: -5"),
            "hbm_bandwidth_gbps",
        ),
        (GPU_YAML.replace("memory_bytes: 16000000000\n", ""), "memory_bytes"),
        (GPU_YAML.replace("bf16_tflops: 100", "bf16_tflops: fast"), "bf16_tflops"),
    ],
)
def test_bad_gpu_yaml_names_field(tmp_path, text, field):
    path = tmp_path / "gpu.yaml"
    path.write_text(text)
    with pytest.raises(CatalogError, match=rf"gpu\.yaml.*{field}"):
        load_gpu(path)


def test_gpu_yaml_not_a_mapping(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(CatalogError, match="mapping"):
        load_gpu(path)
