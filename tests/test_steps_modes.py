"""``--steps full|thin|none``: what ``steps.csv`` holds for long runs.

- ``thin`` with room for every step writes the same bytes as ``full``;
- ``thin`` with fewer rows than steps buckets time (``sim.records.step_thin``): the rows match
  an independent bucketing of the full file (levels of each bucket's first step,
  counts summed), at the narrowest power-of-two width that fits, and the counted
  totals are exact;
- ``none`` writes no ``steps.csv``; the summary's figures are the full run's, and
  ``kvsim report`` renders the run saying the steps were skipped;
- the mode is recorded (``config.yaml`` ``steps``, ``summary.json`` ``steps_file``), a
  bad value is one error naming ``--steps``, and a thinned run is byte-identical when
  repeated.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pandas as pd
import pytest
import yaml
from sim_run_helpers import kvsim_cli, write_yaml

import sim.records.step_thin
from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec, run
from sim.records.step_thin import START_WIDTH_S

LEVELS = [
    "num_running",
    "num_waiting",
    "kv_usage",
    "num_free_blocks",
    "num_cached_blocks",
    "num_cached_free_blocks",
]
COUNTS = [
    "num_prefill_tokens",
    "num_decode_tokens",
    "num_preempted",
    "prefix_queries",
    "prefix_hits",
]


def _spec(workload, steps: str, replicas: int = 1) -> RunSpec:
    return RunSpec(
        workload=str(workload),
        engine=EngineConfig(num_gpu_blocks_override=120, max_num_seqs=32, max_model_len=1024),
        num_replicas=replicas,
        router="round_robin",
        steps=steps,
    )


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    """Enough load on a small KV cache (120 blocks) for preemptions and waiting."""
    base = tmp_path_factory.mktemp("steps-modes")
    return write_yaml(
        base / "wl.yaml",
        {
            "seed": 3,
            "arrival": {"type": "poisson", "rate": 30.0},
            "prompt_len": {"type": "uniform", "min": 50, "max": 300},
            "output_len": {"type": "uniform", "min": 20, "max": 200},
            "num_requests": 300,
        },
    )


@pytest.fixture(scope="module")
def full_run(workload, tmp_path_factory):
    out = tmp_path_factory.mktemp("full") / "run"
    return out, run(_spec(workload, "full", replicas=2), out, render=False)


def _bucket(full: pd.DataFrame, max_rows: int) -> tuple[pd.DataFrame, float]:
    """The thinned rows computed from the full file alone, and the bucket width."""
    width = START_WIDTH_S
    while True:
        keys = np.floor(full["start_s"].to_numpy() / width).astype(np.int64)
        if len(set(zip(keys, full["replica"]))) <= max_rows:
            break
        width *= 2
    # In the order of each bucket's first row in the full file.
    grouped = full.assign(_b=keys).groupby(["_b", "replica"], sort=False)
    first = grouped[["step", "start_s", *LEVELS]].first()
    sums = grouped[["duration_s", *COUNTS]].sum()
    rows = first.join(sums).reset_index()
    return rows, width


def test_thin_with_room_is_the_full_file(workload, full_run, tmp_path):
    out, summary = full_run
    thin = tmp_path / "thin"
    run(_spec(workload, "thin", replicas=2), thin, render=False)
    assert summary["num_steps"] < sim.records.step_thin.THIN_MAX_ROWS  # room for every step
    assert (thin / "steps.csv").read_bytes() == (out / "steps.csv").read_bytes()


@pytest.mark.parametrize("max_rows", [50, 400])
def test_thin_buckets_match_the_full_file(workload, full_run, tmp_path, monkeypatch, max_rows):
    out, summary = full_run
    monkeypatch.setattr(sim.records.step_thin, "THIN_MAX_ROWS", max_rows)
    thin_summary = run(_spec(workload, "thin", replicas=2), tmp_path / "thin", render=False)
    full = pd.read_csv(out / "steps.csv")
    thin = pd.read_csv(tmp_path / "thin" / "steps.csv")
    assert list(thin.columns) == list(full.columns)
    expected, width = _bucket(full, max_rows)
    info = thin_summary["steps_file"]
    assert info == {
        "mode": "thin",
        "rows": len(thin),
        "bucket_s": width,
        "max_rows": max_rows,
        "file": "steps.csv",
    }
    assert len(thin) <= max_rows < len(full)
    for col in ["replica", "step", *LEVELS[:2], "num_free_blocks", *COUNTS]:
        assert thin[col].tolist() == expected[col].tolist(), col
    for col in ("start_s", "duration_s", "kv_usage"):
        np.testing.assert_allclose(thin[col], expected[col], rtol=1e-7, err_msg=col)
    for col in COUNTS:  # totals survive thinning exactly
        assert thin[col].sum() == full[col].sum(), col
    assert math.isclose(thin["duration_s"].sum(), full["duration_s"].sum(), rel_tol=1e-9)
    assert full["num_preempted"].sum() > 0 and full["num_waiting"].max() > 0  # a real test
    summary_figures = {k: v for k, v in summary.items() if k not in ("wall_s", "steps_file")}
    thin_figures = {k: v for k, v in thin_summary.items() if k not in ("wall_s", "steps_file")}
    assert thin_figures == summary_figures


def test_none_writes_no_steps_and_reports_it(workload, full_run, tmp_path):
    out, summary = full_run
    proc = kvsim_cli(
        "run",
        str(workload),
        "--out",
        str(tmp_path / "none"),
        "--steps",
        "none",
        "--num-gpu-blocks-override",
        "120",
        "--max-num-seqs",
        "32",
        "--max-model-len",
        "1024",
        "--num-replicas",
        "2",
    )
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "none"
    assert not (run_dir / "steps.csv").exists()
    assert (run_dir / "requests.csv").read_bytes() == (out / "requests.csv").read_bytes()
    none = json.loads((run_dir / "summary.json").read_text())
    assert none["steps_file"] == {"mode": "none", "rows": 0}
    assert none["verdict"] == summary["verdict"] and none["num_steps"] == summary["num_steps"]
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["steps"] == "none"
    assert sorted(p.name for p in (run_dir / "plots").glob("*.png")) == ["latency.png"]
    (run_dir / "report.html").unlink()
    again = kvsim_cli("report", str(run_dir))
    assert again.returncode == 0 and again.stderr == "", again.stderr
    page = (run_dir / "report.html").read_text()
    assert "steps.csv was not written (--steps none" in page


def test_thinned_run_repeats_byte_identical_and_says_so(workload, tmp_path, monkeypatch):
    monkeypatch.setattr(sim.records.step_thin, "THIN_MAX_ROWS", 100)
    for name in ("a", "b"):
        run(_spec(workload, "thin"), tmp_path / name)
    for file in ("steps.csv", "requests.csv", "config.yaml"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()
    assert yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())["steps"] == "thin"
    page = (tmp_path / "a" / "report.html").read_text()
    assert "steps.csv is thinned (--steps thin)" in page


def test_bad_steps_value_is_one_error(tmp_path):
    proc = kvsim_cli("run", "chat", "--steps", "some", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "kvsim: error: --steps: unknown value 'some' (allowed: full, thin, none)"
    )
    assert not (tmp_path / "x").exists()


def test_parquet_without_pyarrow_is_one_error(monkeypatch, capsys, tmp_path):
    """--steps-format parquet where pyarrow is missing: exit 2, one line saying how to
    get it, nothing written."""
    from sim.app.run_command import run_command

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    status = run_command(
        "chat",
        None,
        None,
        None,
        None,
        None,
        str(tmp_path / "x"),
        False,
        False,
        {},
        steps_format="parquet",
    )
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvsim: error: --steps-format: parquet needs pyarrow")
    assert "pip install 'kvsim[parquet]'" in err and "\n" not in err
    assert not (tmp_path / "x").exists()
