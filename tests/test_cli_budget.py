"""`kvsim budget` and `kvsim list`: output, JSON, and bad input (exit 2, field named,
no traceback)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from sim.cli import app

runner = CliRunner()
BASE = ["budget", "--model", "Llama-3.1-8B", "--gpu", "H100-SXM"]


def test_budget_json_has_blocks_and_terms():
    res = runner.invoke(app, [*BASE, "--gpu-memory-utilization", "0.9", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["num_gpu_blocks"] == 27_284  # test_budget: hand derivation
    for key in (
        "weights_bytes",
        "activation_peak_bytes",
        "non_torch_bytes",
        "available_kv_bytes",
        "bytes_per_block",
        "max_concurrency",
    ):
        assert key in data


def test_budget_flags_reach_the_budget():
    res = runner.invoke(
        app,
        [
            *BASE,
            "--tensor-parallel-size",
            "2",
            "--max-model-len",
            "8192",
            "--max-num-batched-tokens",
            "4096",
            "--max-num-seqs",
            "128",
            "--block-size",
            "32",
            "--kv-cache-dtype",
            "fp8",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert (data["tensor_parallel_size"], data["max_model_len"], data["block_size"]) == (
        2,
        8192,
        32,
    )
    assert (data["max_num_batched_tokens"], data["max_num_seqs"]) == (4096, 128)
    assert data["kv_cache_dtype"] == "fp8" and data["bytes_per_block"] == 32 * 4 * 2 * 128 * 32


def test_budget_table_lists_terms():
    res = runner.invoke(app, BASE)
    assert res.exit_code == 0, res.output
    for term in ("weights", "activation peak", "non-torch", "num_gpu_blocks", "max concurrency"):
        assert term in res.stdout


def test_budget_from_user_files(tmp_path):
    cfg = {
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "num_hidden_layers": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 8192,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "gpu.yaml").write_text(
        "name: Mine\nmemory_gb: 24\nmemory_bytes: 24000000000\nbf16_tflops: 100\n"
        "fp16_tflops: 100\nhbm_bandwidth_gbps: 900\ninterconnect_bandwidth_gbps: 32\n"
        "source: me\n"
    )
    res = runner.invoke(
        app,
        [
            "budget",
            "--model",
            str(tmp_path / "config.json"),
            "--gpu",
            str(tmp_path / "gpu.yaml"),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["gpu"] == "Mine"


def test_list_shows_models_and_gpus():
    res = runner.invoke(app, ["list"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    for name in (
        "Llama-3.1-8B",
        "DeepSeek-V3",
        "Gemma-3-27B",
        "H100-SXM",
        "MI300X",
        "Workload presets",
    ):
        assert name in res.stdout


def test_list_describes_each_preset_model_and_gpu():
    from workloads import list_presets, preset_description

    res = runner.invoke(app, ["list"], env={"COLUMNS": "250"})
    lines = res.stdout.splitlines()

    def row(name):
        return next(line for line in lines if line.startswith(f"│ {name} "))

    for preset in list_presets():
        assert preset_description(preset)[:40] in row(preset)
    assert "Poisson 8 req/s" in row("chat") and "1,000 requests" in row("chat")
    assert "all at t = 0" in row("offline-batch")
    # params, layers, attention kind, KV bytes per token (32 layers x 2 x 8 heads x 128 x 2 B)
    llama = row("Llama-3.1-8B")
    assert "8.0B" in llama and " 32 " in llama and "GQA 32/8" in llama and "128.0 KiB" in llama
    assert "MLA" in row("DeepSeek-V3") and "MoE 256 experts" in row("DeepSeek-V3")
    assert "sliding" in row("Gemma-3-27B")
    assert "NVLink 4" in row("H100-SXM") and "3350" in row("H100-SXM")


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "sim.cli", *args], capture_output=True, text=True)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--model", "Llama-9B", "--gpu", "H100-SXM"], "model"),
        (["--model", "Llama-3.1-8B", "--gpu", "H900"], "gpu"),
        (
            ["--model", "Llama-3.1-8B", "--gpu", "H100-SXM", "--gpu-memory-utilization", "-0.5"],
            "gpu_memory_utilization",
        ),
        (["--model", "Llama-3.1-70B", "--gpu", "H100-SXM"], "--tensor-parallel-size"),
        (
            ["--model", "Llama-3.1-8B", "--gpu", "L40S", "--gpu-memory-utilization", "0.5"],
            "max_model_len",
        ),
        (
            ["--model", "Llama-3.1-8B", "--gpu", "H100-SXM", "--kv-cache-dtype", "fp4"],
            "kv_cache_dtype",
        ),
        (
            ["--model", "Llama-3.1-8B", "--gpu", "H100-SXM", "--calibration", "c.yaml"],
            "--calibration",
        ),
    ],
)
def test_bad_input_exits_2_naming_field(args, field):
    res = run_cli("budget", *args)
    assert res.returncode == 2, res.stderr
    assert field in res.stderr and "Traceback" not in res.stderr


def test_bad_gpu_yaml_field_exits_2(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text(
        "name: X\nmemory_gb: 1\nmemory_bytes: 1\nbf16_tflops: 1\nfp16_tflops: 1\n"
        "hbm_bandwidth_gbps: 1\ninterconnect_bandwidth_gbps: 1\nsource: s\n"
        "speed: fast\n"
    )
    res = run_cli("budget", "--model", "Llama-3.1-8B", "--gpu", str(path))
    assert res.returncode == 2
    assert "gpu.yaml" in res.stderr and "speed" in res.stderr and "Traceback" not in res.stderr
