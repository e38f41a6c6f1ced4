"""``--steps-format parquet``: ``steps.parquet`` holds the rows ``steps.csv`` would
(integers exactly, floats at full precision where the CSV has 9 digits), full or
thinned, and the run report renders from it. Skipped without pyarrow (the optional
``parquet`` extra); the CSV is the default either way."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sim_run_helpers import kvsim_cli, write_yaml

import sim.records.step_thin
from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec, run

pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'kvsim[parquet]')")

FLOATS = ("start_s", "duration_s", "kv_usage")


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    return write_yaml(
        tmp_path_factory.mktemp("pq") / "wl.yaml",
        {
            "seed": 2,
            "arrival": {"type": "poisson", "rate": 30.0},
            "prompt_len": {"type": "uniform", "min": 50, "max": 300},
            "output_len": {"type": "uniform", "min": 20, "max": 200},
            "num_requests": 200,
        },
    )


def _spec(workload, steps: str, fmt: str) -> RunSpec:
    return RunSpec(
        workload=str(workload),
        engine=EngineConfig(num_gpu_blocks_override=120, max_num_seqs=32, max_model_len=1024),
        num_replicas=2,
        steps=steps,
        steps_format=fmt,
    )


def _same_rows(parquet: pd.DataFrame, csv: pd.DataFrame) -> None:
    assert list(parquet.columns) == list(csv.columns) and len(parquet) == len(csv)
    for col in csv.columns:
        if col in FLOATS:
            np.testing.assert_allclose(parquet[col], csv[col], rtol=1e-8, err_msg=col)
        else:
            assert parquet[col].tolist() == csv[col].tolist(), col


@pytest.mark.parametrize("steps", ["full", "thin"])
def test_parquet_holds_the_csv_rows(workload, tmp_path, monkeypatch, steps):
    monkeypatch.setattr(sim.records.step_thin, "THIN_MAX_ROWS", 300)
    csv_summary = run(_spec(workload, steps, "csv"), tmp_path / "csv", render=False)
    pq_summary = run(_spec(workload, steps, "parquet"), tmp_path / "pq", render=False)
    assert not (tmp_path / "pq" / "steps.csv").exists()
    _same_rows(
        pd.read_parquet(tmp_path / "pq" / "steps.parquet"),
        pd.read_csv(tmp_path / "csv" / "steps.csv"),
    )
    assert pq_summary["steps_file"] == {**csv_summary["steps_file"], "file": "steps.parquet"}
    assert (tmp_path / "pq" / "requests.csv").read_bytes() == (
        tmp_path / "csv" / "requests.csv"
    ).read_bytes()


def test_report_renders_from_parquet(workload, tmp_path):
    proc = kvsim_cli(
        "run",
        str(workload),
        "--steps-format",
        "parquet",
        "--num-gpu-blocks-override",
        "120",
        "--max-model-len",
        "1024",
        "--out",
        str(tmp_path / "run"),
    )
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "run"
    config = (run_dir / "config.yaml").read_text()
    assert "steps_format: parquet" in config
    (run_dir / "report.html").unlink()
    again = kvsim_cli("report", str(run_dir))
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert {p.name for p in (run_dir / "plots").glob("*.png")} == {"timeline.png", "latency.png"}
    page = (run_dir / "report.html").read_text()
    assert "The step rows are in steps.parquet" in page
    steps = json.loads((run_dir / "summary.json").read_text())["num_steps"]
    assert len(pd.read_parquet(run_dir / "steps.parquet")) == steps
