"""Running sweeps: resumable after a kill, the same sweep.csv on Ray as on local processes."""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sim_run_helpers import REPO, write_yaml

from sim.sweep import run_sweep
from sim.sweep.table import METRIC_COLUMNS

SPEC = {
    "name": "resume",
    "base": {
        "workload": {
            "arrival": {"type": "poisson", "rate": 8.0},
            "prompt_len": {"type": "lognormal", "median": 200, "p90": 700, "max": 1024},
            "output_len": {"type": "lognormal", "median": 100, "p90": 400, "max": 1000},
            "num_requests": 30,
        },
        "engine": {"max_model_len": 2048},
    },
    "axes": [
        {"path": "engine.num_gpu_blocks_override", "values": [160, 600]},
        {"path": "workload.arrival.rate", "values": [4, 16]},
    ],
    "seeds": [3],
}


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_yaml(tmp_path_factory.mktemp("spec") / "resume.yaml", SPEC)


@pytest.fixture(scope="module")
def reference(spec_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep run once, uninterrupted, on local processes."""
    out = tmp_path_factory.mktemp("reference") / "sweep"
    result = run_sweep(spec_path, out, jobs=2)
    assert result.statuses == {"ok": 4} and not result.errors
    return out


def test_sweep_csv_has_one_row_per_point(reference: Path) -> None:
    with (reference / "sweep.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["point"]) for r in rows] == list(range(4))
    assert [r["engine.num_gpu_blocks_override"] for r in rows] == ["160"] * 2 + ["600"] * 2
    assert [r["workload.arrival.rate"] for r in rows] == ["4", "16"] * 2
    assert {r["seed"] for r in rows} == {"3"} and {r["status"] for r in rows} == {"ok"}
    assert all(r[c] != "" for r in rows for c in ("throughput_rps", "ttft_s_p99"))
    assert set(METRIC_COLUMNS) <= set(rows[0])
    for r in rows:
        assert (reference / "points" / r["point_id"] / "summary.json").is_file()
        assert (reference / "points" / r["point_id"] / "report.html").is_file()
    assert (reference / "report.html").is_file() and (reference / "sweep.yaml").is_file()


def test_rerun_of_finished_sweep_runs_nothing(reference: Path, spec_path: Path) -> None:
    before = (reference / "sweep.csv").read_bytes()
    result = run_sweep(spec_path, reference, jobs=2, render=False)
    assert result.skipped == 4 and result.statuses == {}
    assert (reference / "sweep.csv").read_bytes() == before


def test_resume_after_damage(reference: Path, spec_path: Path, tmp_path: Path) -> None:
    """Missing points, a leftover temporary directory and a half-written sweep.csv."""
    out = tmp_path / "sweep"
    shutil.copytree(reference, out)
    points = sorted((out / "points").iterdir())
    shutil.rmtree(points[1])
    shutil.rmtree(points[3])
    leftover = out / "points" / f".{points[3].name}.tmp-abc123"
    leftover.mkdir()
    (leftover / "steps.csv").write_text("replica,step\n0,")
    text = (out / "sweep.csv").read_text()
    (out / "sweep.csv").write_text(text[: len(text) // 2])
    result = run_sweep(spec_path, out, jobs=2, render=False)
    assert result.skipped == 2 and result.statuses == {"ok": 2}
    assert not leftover.exists()
    assert (out / "sweep.csv").read_bytes() == (reference / "sweep.csv").read_bytes()


def _complete_points(out: Path) -> int:
    points = out / "points"
    if not points.is_dir():
        return 0
    return sum(
        (p / "summary.json").is_file() for p in points.iterdir() if not p.name.startswith(".")
    )


def test_kill_and_rerun_gives_the_same_sweep_csv(
    reference: Path, spec_path: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    scratch = tmp_path / "tmp"  # the killed processes' temporary directory
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(scratch)}
    cmd = [sys.executable, "-m", "sim.cli", "sweep", str(spec_path), "--out", str(out)]
    proc = subprocess.Popen(
        [*cmd, "--jobs", "1"],
        env=env,
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while _complete_points(out) < 1 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = _complete_points(out)
    assert 1 <= done < 4, f"the kill came too late ({done} points done)"
    # A point whose workload is on this machine makes no scratch directory that a
    # worker killed outright would leave behind.
    assert not list(scratch.glob("kvsim-point-*"))
    with (out / "sweep.csv").open() as f:
        rows = list(csv.reader(f))
    assert all(len(r) == len(rows[0]) for r in rows)
    assert len(rows) - 1 <= done
    result = run_sweep(spec_path, out, jobs=2, render=False)
    assert result.skipped == done and result.statuses == {"ok": 4 - done}
    assert (out / "sweep.csv").read_bytes() == (reference / "sweep.csv").read_bytes()
    assert not [p for p in (out / "points").iterdir() if p.name.startswith(".")]


def test_ray_executor_gives_the_same_sweep_csv(
    reference: Path, spec_path: Path, tmp_path: Path
) -> None:
    pytest.importorskip("ray", reason="ray is not installed (pip install 'kvsim[ray]')")
    out = tmp_path / "sweep"
    result = run_sweep(spec_path, out, executor="ray", jobs=2, render=False)
    assert result.statuses == {"ok": 4} and not result.errors
    assert (out / "sweep.csv").read_bytes() == (reference / "sweep.csv").read_bytes()
    for point in (reference / "points").iterdir():
        for name in ("summary.json", "requests.csv", "steps.csv"):
            ours = (out / "points" / point.name / name).read_text()
            theirs = (point / name).read_text()
            if name == "summary.json":  # wall_s differs
                ours, theirs = (
                    [line for line in t.splitlines() if "wall_s" not in line]
                    for t in (ours, theirs)
                )
            assert ours == theirs, f"{point.name}/{name}"


def test_failed_point_is_recorded_once_and_not_retried(tmp_path: Path) -> None:
    """A point whose every prompt exceeds max_model_len: a row with status 'rejected'."""
    spec = {
        "base": {
            "workload": {
                "arrival": {"type": "poisson", "rate": 4.0},
                "prompt_len": {"type": "fixed", "value": 600},
                "output_len": {"type": "fixed", "value": 10},
                "num_requests": 10,
            },
            "engine": {"latency_model": "constant"},
        },
        "axes": [{"path": "engine.max_model_len", "values": [512, 2048]}],
    }
    path = write_yaml(tmp_path / "s.yaml", spec)
    result = run_sweep(path, tmp_path / "out", jobs=2, render=False)
    assert result.statuses == {"rejected": 1, "ok": 1}
    with (tmp_path / "out" / "sweep.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["status"] for r in rows] == ["rejected", "ok"]
    assert "max_model_len" in rows[0]["error"] and rows[0]["throughput_rps"] == ""
    again = run_sweep(path, tmp_path / "out", jobs=2)
    assert again.skipped == 2 and again.statuses == {}
    assert (tmp_path / "out" / "report.html").is_file()


def test_edited_spec_reuses_unchanged_points(
    reference: Path, spec_path: Path, tmp_path: Path
) -> None:
    """A value inserted in an axis runs only the new points."""
    out = tmp_path / "sweep"
    shutil.copytree(reference, out)
    edited = dict(
        SPEC, axes=[SPEC["axes"][0], {"path": "workload.arrival.rate", "values": [4, 8, 16]}]
    )
    path = write_yaml(spec_path.with_name("edited.yaml"), edited)
    result = run_sweep(path, out, jobs=2, render=False)
    assert result.skipped == 4 and result.statuses == {"ok": 2}
    with (out / "sweep.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["workload.arrival.rate"] for r in rows] == ["4", "8", "16"] * 2
