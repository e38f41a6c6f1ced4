"""Calibration files: schema, fitted latency model, refusal of other models/GPUs, and
``kvsim calibrate`` / ``run`` / ``budget`` end to end on a CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from calibrate.calibration_file import (
    SCHEMA_VERSION,
    Calibration,
    CalibrationError,
    FittedLatencyModel,
    GPUSection,
    LatencySection,
    ModelSection,
    load_calibration,
    save_calibration,
)
from calibrate.catalog import load_gpu, load_model
from calibrate.harness.memory_backend import AnalyticMemoryBackend
from calibrate.latency import make_latency_model
from calibrate.profile_run import ProfileConfig, profile_run
from calibrate.step_features import FEATURES

COEF = {"const": 2e-4, "dense": 1.3, "prefill_attn": 0.9, "prefill_kv": 0.2,
        "decode_kv": 1.8, "requests": 5e-6, "attn_phases": 1e-5, "allreduce": 0.0}  # fmt: skip


def make_calibration(model: str = "Gemma-3-27B", gpu: str = "H100-SXM") -> Calibration:
    spec, hw = load_model(model), load_gpu(gpu)
    prof = profile_run(
        spec, ProfileConfig(max_model_len=8192), AnalyticMemoryBackend(hw.memory_bytes)
    )
    return Calibration(
        schema_version=SCHEMA_VERSION, device="cuda", dtype="bfloat16",
        tensor_parallel_size=1, attention_backend="triton",
        versions={"torch": "2.11", "triton": "3.6.0", "cuda": "13.0", "kvsim": "test"},
        model=ModelSection(name=spec.name, spec=spec, profiled_num_layers=8),
        gpu=GPUSection(name="NVIDIA H100 80GB HBM3", catalog_name=hw.name,
                       memory_bytes=hw.memory_bytes, bf16_tflops=hw.bf16_tflops,
                       fp16_tflops=hw.fp16_tflops, hbm_bandwidth_gbps=hw.hbm_bandwidth_gbps,
                       interconnect_bandwidth_gbps=hw.interconnect_bandwidth_gbps),
        latency=LatencySection(features=list(FEATURES), coefficients=COEF,
                               holdout_mape={"all": 0.05}, train_mape={"all": 0.04},
                               residual_quantiles={"p50_abs": 0.03}, num_train=3,
                               num_holdout=1, timing="synthetic"),
        kv_budget=prof.to_dict(),
    )  # fmt: skip


@pytest.fixture
def cal_path(tmp_path) -> Path:
    path = tmp_path / "cal.yaml"
    save_calibration(make_calibration(), path)
    return path


def test_round_trip_and_fitted_model(cal_path):
    cal = load_calibration(cal_path)
    assert cal.kv_budget["num_gpu_blocks"] > 0 and cal.model.name == "Gemma-3-27B"
    lat = make_latency_model("fitted", calibration=cal_path, model=load_model("Gemma-3-27B"),
                             gpu=load_gpu("H100-SXM"))  # fmt: skip
    assert isinstance(lat, FittedLatencyModel) and lat.describe()["kind"] == "fitted"
    ctx = np.array([100, 900, 3000, 5])
    one = [lat.step_time(np.ones(4, int), ctx)]
    win = {1024: np.array([np.minimum(ctx + 1, 1024).sum()])}
    many = lat.decode_step_times(np.array([4]), np.array([ctx.sum()]), win)
    assert many[0] == pytest.approx(one[0], rel=1e-12) and one[0] > 0
    assert lat.step_time(np.array([512, 1]), np.array([0, 40])) > one[0] * 0.5
    assert lat.step_time(np.zeros(0, int), np.zeros(0, int)) == 0.0


def test_refuses_other_model_and_gpu(cal_path):
    with pytest.raises(CalibrationError, match="for model 'Gemma-3-27B', not 'Llama-3.1-8B'"):
        make_latency_model("fitted", calibration=cal_path, model=load_model("Llama-3.1-8B"))
    with pytest.raises(CalibrationError, match="for GPU 'H100-SXM', not 'H200'"):
        make_latency_model("fitted", calibration=cal_path, gpu=load_gpu("H200"))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(schema_version=99), "schema_version 99"),
        (lambda d: d["latency"]["coefficients"].pop("dense"), "lacks"),
        (lambda d: d["kv_budget"].pop("num_gpu_blocks"), "kv_budget.num_gpu_blocks"),
        (lambda d: d["gpu"].update(memory_bytes=-1), "gpu.memory_bytes"),
        (lambda d: d.update(kind="other"), "not a kvsim calibration"),
    ],
)
def test_invalid_files_name_the_field(cal_path, edit, message):
    data = yaml.safe_load(cal_path.read_text())
    edit(data)
    cal_path.write_text(yaml.safe_dump(data))
    with pytest.raises(CalibrationError, match=message):
        load_calibration(cal_path)
    with pytest.raises(CalibrationError, match="cannot read"):
        load_calibration(cal_path.with_name("missing.yaml"))


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    code = "from sim.cli import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=240, cwd=cwd)  # fmt: skip


def test_budget_uses_measured_terms_and_refuses_mismatch(cal_path):
    res = _cli("budget", "--model", "Gemma-3-27B", "--gpu", "H100-SXM", "--max-model-len",
               "8192", "--calibration", str(cal_path), "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["num_gpu_blocks"] == load_calibration(cal_path).kv_budget["num_gpu_blocks"]
    bad = _cli("budget", "--model", "Llama-3.1-8B", "--gpu", "H100-SXM", "--calibration",
               str(cal_path))  # fmt: skip
    assert bad.returncode == 2 and "--calibration" in bad.stderr and "Gemma-3-27B" in bad.stderr


def test_run_and_budget_take_model_gpu_and_tp_from_the_file(cal_path, tmp_path):
    """--calibration alone: the file says which model, GPU and TP it is for."""
    res = _cli("run", "--calibration", str(cal_path), "--num-requests", "20",
               "--max-model-len", "8192", "--out", str(tmp_path / "run"))  # fmt: skip
    assert res.returncode == 0, res.stderr
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert (config["model"], config["gpu"]) == ("Gemma-3-27B", "H100-SXM")
    assert config["engine"]["tensor_parallel_size"] == 1
    assert (
        config["kv_budget"]["num_gpu_blocks"]
        == load_calibration(cal_path).kv_budget["num_gpu_blocks"]
    )
    budget = _cli("budget", "--calibration", str(cal_path), "--max-model-len", "8192", "--json")
    assert budget.returncode == 0, budget.stderr
    assert json.loads(budget.stdout)["model"] == "Gemma-3-27B"
    tp2 = _cli("run", "--calibration", str(cal_path), "--tensor-parallel-size", "2",
               "--out", str(tmp_path / "tp2"))  # fmt: skip
    assert tp2.returncode == 2 and "tensor_parallel_size 1" in tp2.stderr


def test_calibrate_quick_cpu_end_to_end(tmp_path):
    pytest.importorskip("torch", reason="torch not installed (calibrate extra)")
    out = tmp_path / "tiny.yaml"
    res = _cli("calibrate", "--device", "cpu", "--quick", "--out", str(out))
    assert res.returncode == 0, res.stderr
    cal = load_calibration(out)
    assert (tmp_path / "tiny.csv").read_text().startswith("regime,")
    assert set(cal.latency.holdout_mape) == {"all", "decode", "prefill", "mixed"}
    assert cal.latency.holdout_mape["all"] < 0.30  # 0.107 when last measured (CPU, --quick)
    assert "holdout MAPE" in res.stdout
    short = ("--num-requests", "100", "--no-report")
    run = _cli("run", "--model", "kvsim-tiny", "--gpu", "cpu", "--calibration", str(out),
               "--out", str(tmp_path / "run"), *short, cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr
    # Without --model / --gpu the file's model, GPU and TP are taken.
    alone = _cli("run", "--calibration", str(out), "--out", str(tmp_path / "r2"), *short,
                 cwd=tmp_path)  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    config = yaml.safe_load((tmp_path / "r2" / "config.yaml").read_text())
    assert (config["model"], config["engine"]["tensor_parallel_size"]) == ("kvsim-tiny", 1)
    other = _cli("run", "--model", "Llama-3.1-8B", "--calibration", str(out),
                 "--out", str(tmp_path / "r3"))  # fmt: skip
    assert other.returncode == 2 and "kvsim-tiny" in other.stderr
