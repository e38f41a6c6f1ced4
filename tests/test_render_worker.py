"""The report rendered by the worker process is the one rendered in process, and a
worker that cannot render leaves the run to render (and fail) itself."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reports.render_worker import RenderWorker
from reports.run_report import render_run
from sim.app.run import RunSpec, run
from workloads.overrides import WorkloadOverrides


def _two_copies(tmp_path: Path) -> tuple[Path, Path]:
    """A small run, unrendered, twice: the first copy rendered in process."""
    spec = RunSpec(workload="chat", workload_overrides=WorkloadOverrides(num_requests=30))
    run(spec, tmp_path / "run", render=False, helpers=False)
    here, there = tmp_path / "here", tmp_path / "there"
    shutil.copytree(tmp_path / "run", here)
    shutil.copytree(tmp_path / "run", there)
    render_run(here)
    return here, there


def test_the_worker_writes_what_the_run_would(tmp_path: Path) -> None:
    here, there = _two_copies(tmp_path)
    worker = RenderWorker()
    assert worker._proc is not None  # it started
    assert worker.render(there)  # by the worker, not by the fallback
    assert worker._proc is None
    names = sorted(p.relative_to(here) for p in here.rglob("*") if p.is_file())
    assert Path("report.html") in names and Path("plots/latency.png") in names
    assert names == sorted(p.relative_to(there) for p in there.rglob("*") if p.is_file())
    for name in names:
        assert (here / name).read_bytes() == (there / name).read_bytes(), name


def test_a_failing_worker_leaves_the_error_to_the_run(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("[1, 2]\n")  # not an object: render_run refuses
    worker = RenderWorker()
    with pytest.raises(ValueError, match="expected a JSON object"):
        worker.render(tmp_path)
    assert worker._proc is None


def test_an_unused_worker_is_stopped(tmp_path: Path) -> None:
    worker = RenderWorker()
    proc = worker._proc
    assert proc is not None
    worker.close()
    assert proc.poll() is not None and worker._proc is None


def test_a_failed_child_leaves_its_plots_to_the_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Drawn in parallel, the request plots come from a forked child; when the child
    fails, this process draws them after the step plots: the same files either way."""
    import os

    import reports.plots as plots

    here, there = _two_copies(tmp_path)
    parent, real = os.getpid(), plots._request_plots

    def fails_in_the_child(*args: object) -> list[Path]:
        if os.getpid() != parent:
            raise RuntimeError("child")
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(plots, "_request_plots", fails_in_the_child)
    render_run(there, parallel=True)
    names = sorted(p.relative_to(here) for p in here.rglob("*.png"))
    assert Path("plots/latency.png") in names and Path("plots/timeline.png") in names
    assert names == sorted(p.relative_to(there) for p in there.rglob("*.png"))
    for name in names:
        assert (here / name).read_bytes() == (there / name).read_bytes(), name
