"""The report rendered by the worker process is the one rendered in process, and a
worker that cannot render leaves the run to render (and fail) itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reports import render_worker
from reports.render_worker import RenderWorker
from reports.run_report import render_run
from sim import offload
from sim.app.run import RunSpec, run
from sim.cli.early import start_report_worker
from workloads.overrides import WorkloadOverrides

_ROOT = Path(__file__).resolve().parents[1]


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


def test_a_worker_that_followed_the_steps_writes_what_the_run_would(tmp_path: Path) -> None:
    here, there = _two_copies(tmp_path)
    steps = there / "steps.csv"
    text = steps.read_bytes()
    steps.unlink()
    worker = RenderWorker(follow=steps)  # started before the file exists, as in a run
    half = text.index(b"\n", len(text) // 2) - 5
    steps.write_bytes(text[:half])  # a part, cut mid-line, then the rest
    with steps.open("ab") as f:
        f.write(text[half:])
    assert worker.render(there)
    names = sorted(p.relative_to(here) for p in here.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(there) for p in there.rglob("*") if p.is_file())
    for name in names:
        assert (here / name).read_bytes() == (there / name).read_bytes(), name


def test_meanwhile_runs_while_the_worker_renders(tmp_path: Path) -> None:
    here, there = _two_copies(tmp_path)
    worker = RenderWorker()
    proc = worker._proc
    assert proc is not None
    seen: list[bool] = []

    def meanwhile() -> None:
        assert proc.stdin is not None and proc.stdin.closed  # the directory was sent
        seen.append(proc.poll() is None)  # and the worker has not answered yet

    assert worker.render(there, meanwhile=meanwhile)
    assert seen == [True]  # once, before the worker was done
    assert proc.stdout is not None and proc.stdout.closed and proc.poll() == 0
    assert (there / "report.html").is_file()


def test_meanwhile_runs_once_when_the_run_renders_itself(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("[1, 2]\n")
    worker = RenderWorker()
    calls: list[int] = []
    with pytest.raises(ValueError, match="expected a JSON object"):
        worker.render(tmp_path, meanwhile=lambda: calls.append(1))
    assert calls == [1]
    calls.clear()
    worker = RenderWorker()
    worker.close()  # no worker left: the run renders in process
    with pytest.raises(ValueError, match="expected a JSON object"):
        worker.render(tmp_path, meanwhile=lambda: calls.append(1))
    assert calls == [1]


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


def test_steps_read_after_the_fork_and_the_child_waited_for_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In parallel the steps are read while the child draws the request plots; when
    reading them fails, the child is still waited for before the error goes on."""
    import os

    import reports.plots as plots
    from reports.run_records import RunRecordsError, read_request_records

    here, _ = _two_copies(tmp_path)
    summary = json.loads((here / "summary.json").read_text())
    requests, _ = read_request_records(here, summary)
    events: list[str] = []
    waited: list[int] = []
    real_fork, real_wait = plots._fork, plots._succeeded

    def fork() -> int | None:
        pid = real_fork()
        if pid:  # in this process (the child draws and exits)
            events.append("fork")
        return pid

    def steps() -> object:
        events.append("steps")
        raise RunRecordsError("steps.csv: broken")

    def succeeded(pid: int) -> bool:
        waited.append(pid)
        return real_wait(pid)

    monkeypatch.setattr(plots, "_fork", fork)
    monkeypatch.setattr(plots, "_succeeded", succeeded)
    with pytest.raises(RunRecordsError, match="broken"):
        plots.render_run_plots(here, 100, steps, requests, summary=summary, parallel=True)  # type: ignore[arg-type]
    assert events == ["fork", "steps"] and len(waited) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(waited[0], 0)  # reaped


def test_serial_render_reads_the_steps_before_removing_any_plot(tmp_path: Path) -> None:
    """Without a child, a steps file that cannot be read leaves the earlier PNGs."""
    import reports.plots as plots
    from reports.run_records import RunRecordsError

    here, _ = _two_copies(tmp_path)
    before = {p.name: p.read_bytes() for p in (here / "plots").glob("*.png")}
    assert "timeline.png" in before

    def steps() -> object:
        raise RunRecordsError("steps.csv: broken")

    with pytest.raises(RunRecordsError):
        plots.render_run_plots(here, 100, steps, None)  # type: ignore[arg-type]
    assert {p.name: p.read_bytes() for p in (here / "plots").glob("*.png")} == before


@pytest.mark.parametrize("parallel", [False, True])
def test_the_steps_file_error_comes_first(tmp_path: Path, parallel: bool) -> None:
    """Both records files unreadable: the error names steps.csv, however the plots are
    drawn."""
    here, _ = _two_copies(tmp_path)
    (here / "steps.csv").unlink()
    (here / "requests.csv").write_text("")
    from reports.run_records import RunRecordsError

    with pytest.raises(RunRecordsError, match=r"steps\.csv: missing"):
        render_run(here, parallel=parallel)
    (here / "steps.csv").write_text("replica,step\n")  # readable header, columns missing
    with pytest.raises(RunRecordsError, match=r"steps\.csv: header"):
        render_run(here, parallel=parallel)


def test_a_worker_started_early_is_the_one_the_run_takes(tmp_path: Path) -> None:
    here, there = _two_copies(tmp_path)
    render_worker.start_early()
    early = render_worker._early
    assert early is not None
    worker = RenderWorker(follow=there / "steps.csv")
    assert worker._proc is early and render_worker._early is None  # taken, not a new one
    assert worker.render(there)
    for name in ("report.html", "plots/latency.png", "plots/timeline.png"):
        assert (here / name).read_bytes() == (there / name).read_bytes(), name


def test_the_worker_runs_below_the_helpers_priority() -> None:
    """The worker lowers its own priority as it starts, below the helpers'."""
    from sim.offload import HELPER_NICENESS

    assert render_worker.NICENESS > HELPER_NICENESS
    want = min(os.nice(0) + render_worker.NICENESS, 19)
    worker = RenderWorker()
    proc = worker._proc
    assert proc is not None
    try:
        deadline = time.monotonic() + 10.0
        while os.getpriority(os.PRIO_PROCESS, proc.pid) != want and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == want
    finally:
        worker.close()


def test_an_early_worker_nobody_takes_is_killed() -> None:
    render_worker.start_early()
    early = render_worker._early
    assert early is not None and early.poll() is None
    render_worker._drop_early()  # what exit runs
    assert early.poll() is not None and render_worker._early is None


@pytest.mark.parametrize(
    ("args", "helpers", "started"),
    [
        (["chat"], "1", True),
        (["chat", "--no-report"], "1", False),
        (["--help"], "1", False),
        (["chat"], "0", False),  # no helper processes: the run renders in process
    ],
)
def test_kvsim_run_starts_its_worker_first_only_when_it_will_use_it(
    monkeypatch: pytest.MonkeyPatch, args: list[str], helpers: str, started: bool
) -> None:
    monkeypatch.setenv("KVSIM_HELPERS", helpers)
    if started and not offload.allowed():
        pytest.skip("helper processes need fork and two CPUs")
    start_report_worker(args)
    try:
        assert (render_worker._early is not None) == started
    finally:
        render_worker._drop_early()


def test_kvsim_run_renders_with_the_early_worker(tmp_path: Path) -> None:
    """The command as a user runs it: the report is the one rendered in process."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "sim.cli", "run", "chat", "--num-requests", "30"]
    subprocess.run([*cmd, "--out", str(out)], check=True, capture_output=True, cwd=_ROOT)
    here = tmp_path / "here"
    shutil.copytree(out, here)
    render_run(here)
    for name in ("report.html", "plots/latency.png", "plots/timeline.png"):
        assert (here / name).read_bytes() == (out / name).read_bytes(), name
