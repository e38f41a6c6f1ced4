"""Nothing a user wrote is lost: ``--out`` is checked before any simulation, kvsim
never deletes, renames or overwrites what it did not write, and signals leave no
temporary directory and no process behind.

Every test that puts a user's file where kvsim writes checks it byte for byte
afterwards (and that no hidden copy or leftover appeared beside it).
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sim_run_helpers import REPO, kvsim_cli, run_sim, write_yaml

from sim.app.outdir import MARKER, OutputError, check_output, read_kind
from sim.sweep import run_sweep

SMALL = {
    "arrival": {"type": "poisson", "rate": 4.0},
    "prompt_len": 64,
    "output_len": 8,
    "num_requests": 6,
}
# Runs for minutes (about 40 million decode tokens): long enough to be interrupted.
LONG = {
    **SMALL,
    "arrival": {"type": "poisson", "rate": 50.0},
    "num_requests": 200_000,
    "prompt_len": 500,
    "output_len": 200,
}
USER_BYTES = b"my notes\x00\xff, not kvsim's\n"


def _user_file(path: Path) -> Path:
    path.write_bytes(USER_BYTES)
    return path


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _one_error_line(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture()
def small(tmp_path: Path) -> Path:
    return write_yaml(tmp_path / "small.yaml", SMALL)


@pytest.fixture()
def long_workload(tmp_path: Path) -> Path:
    return write_yaml(tmp_path / "long.yaml", LONG)


# Row 1: an existing directory holding a user's file.
def test_run_refuses_a_directory_it_did_not_write(small: Path, tmp_path: Path) -> None:
    target = tmp_path / "mine"
    target.mkdir()
    _user_file(target / "notes.txt")
    proc = kvsim_cli("run", str(small), "--out", str(target))
    _one_error_line(proc, "--out", "mine", "notes.txt", "--force")
    assert _entries(target) == ["notes.txt"]
    assert (target / "notes.txt").read_bytes() == USER_BYTES
    assert _entries(tmp_path) == ["mine", "small.yaml"]


def test_force_writes_beside_the_users_files(small: Path, tmp_path: Path) -> None:
    target = tmp_path / "mine"
    target.mkdir()
    _user_file(target / "notes.txt")
    for extra in ([], ["--decisions"], []):  # a second and third run replace kvsim's files
        proc = kvsim_cli("run", str(small), "--out", str(target), "--force", *extra)
        assert proc.returncode == 0, proc.stderr
        if not (target / "plots" / "sketch.txt").exists():  # the user adds a file there
            _user_file(target / "plots" / "sketch.txt")
    assert (target / "notes.txt").read_bytes() == USER_BYTES
    assert (target / "plots" / "sketch.txt").read_bytes() == USER_BYTES
    assert (target / "summary.json").is_file() and (target / "plots" / "timeline.png").is_file()
    assert not (target / "decisions.jsonl").exists(), "a stale kvsim file was kept"
    assert read_kind(target) == "run"
    assert not [n for n in _entries(target) if ".tmp-" in n or ".old-" in n]


def test_force_never_overwrites_a_users_file_of_kvsims_name(small: Path, tmp_path: Path) -> None:
    target = tmp_path / "mine"
    target.mkdir()
    _user_file(target / "summary.json")
    proc = kvsim_cli("run", str(small), "--out", str(target), "--force")
    _one_error_line(proc, "summary.json", "never overwrites")
    assert _entries(target) == ["summary.json"]
    assert (target / "summary.json").read_bytes() == USER_BYTES


def test_an_earlier_run_is_replaced_whole(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_sim(small, out, decisions=True)
    assert (out / "decisions.jsonl").is_file() and read_kind(out) == "run"
    run_sim(small, out)
    assert not (out / "decisions.jsonl").exists()
    assert _entries(tmp_path) == ["run", "small.yaml"]
    # A user's file added to a run directory makes it theirs: refused without --force.
    _user_file(out / "notes.txt")
    with pytest.raises(OutputError, match="notes.txt"):
        run_sim(small, out)
    assert (out / "notes.txt").read_bytes() == USER_BYTES


def test_directories_written_before_the_marker_are_still_kvsims(
    small: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    run_sim(small, out)
    (out / MARKER).unlink()
    assert read_kind(out) == "run"  # summary.json and config.yaml naming kvsim_version
    run_sim(small, out)
    assert (out / MARKER).is_file()


def test_a_directory_of_another_kind_is_refused(small: Path, tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    (sweep_dir / MARKER).write_text('{"kind": "sweep"}\n')
    proc = kvsim_cli("run", str(small), "--out", str(sweep_dir))
    _one_error_line(proc, "kvsim sweep directory")


# Row 2: an existing regular file; refused before the simulation.
def test_run_refuses_a_file_before_simulating(long_workload: Path, tmp_path: Path) -> None:
    target = _user_file(tmp_path / "result")
    start = time.monotonic()
    proc = kvsim_cli("run", str(long_workload), "--out", str(target))
    assert time.monotonic() - start < 30, "the run was simulated before --out was checked"
    _one_error_line(proc, "--out", "result", "not a directory")
    assert target.read_bytes() == USER_BYTES
    assert _entries(tmp_path) == ["long.yaml", "result"]


# Row 3: '.', /proc, a read-only place, a file in the parent path; sweep --out FILE.
def test_run_refuses_the_current_directory_with_files(small: Path, tmp_path: Path) -> None:
    proc = kvsim_cli("run", str(small), "--out", ".", cwd=tmp_path)
    _one_error_line(proc, "--out .", "small.yaml")
    assert _entries(tmp_path) == ["small.yaml"]


def test_run_into_an_empty_current_directory_writes_in_place(small: Path, tmp_path: Path) -> None:
    here = tmp_path / "here"
    here.mkdir()
    proc = kvsim_cli("run", str(small), "--out", ".", cwd=here)
    assert proc.returncode == 0, proc.stderr
    assert (here / "summary.json").is_file() and read_kind(here) == "run"


@pytest.mark.parametrize("where", ["/proc/kvsim-test/run", "/sys/kvsim-test", "{tmp}/file/run"])
def test_run_refuses_places_where_nothing_can_be_created(
    small: Path, tmp_path: Path, where: str
) -> None:
    _user_file(tmp_path / "file")
    path = where.format(tmp=tmp_path)
    if path.startswith("/sys") and os.access("/sys", os.W_OK) and not Path("/sys").is_mount():
        pytest.skip("/sys is writable here")
    proc = kvsim_cli("run", str(small), "--out", path)
    _one_error_line(proc, "--out", path)
    assert (tmp_path / "file").read_bytes() == USER_BYTES


def test_read_only_directory_is_refused_up_front(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root may write into a read-only directory")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(OutputError, match="cannot create"):
            check_output(ro / "run", "run")
    finally:
        ro.chmod(0o755)


def test_sweep_and_plan_refuse_a_file(small: Path, tmp_path: Path) -> None:
    spec = write_yaml(
        tmp_path / "sweep.yaml",
        {
            "name": "s",
            "base": {"workload": str(small)},
            "axes": [{"path": "workload.arrival.rate", "values": [2, 4]}],
        },
    )
    target = _user_file(tmp_path / "target")
    _one_error_line(kvsim_cli("sweep", str(spec), "--out", str(target)), "--out", "target")
    proc = kvsim_cli(
        "plan",
        "--question",
        "max_rate",
        "--workload",
        str(small),
        "--ttft-p90-s",
        "1",
        "--out",
        str(target),
    )
    _one_error_line(proc, "--out", "target")
    assert target.read_bytes() == USER_BYTES
    # A directory of the user's is refused too, and kept as it was.
    mine = tmp_path / "mine"
    mine.mkdir()
    _user_file(mine / "notes.txt")
    _one_error_line(kvsim_cli("sweep", str(spec), "--out", str(mine)), "notes.txt", "--force")
    assert _entries(mine) == ["notes.txt"]


# Rows 4 and 6: SIGTERM, SIGHUP and SIGINT during a run.
def _start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "sim.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(predicate, what: str, timeout: float = 60) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def _alive(pids: list[int]) -> list[int]:
    out = subprocess.run(
        ["ps", "-o", "pid=,stat=", "-p", ",".join(map(str, pids))], capture_output=True, text=True
    )
    return [
        int(line.split()[0])
        for line in out.stdout.splitlines()
        if line.split() and not line.split()[1].startswith("Z")
    ]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signal_during_run_leaves_nothing(long_workload: Path, tmp_path: Path, sig: int) -> None:
    parent = tmp_path / "runs"
    parent.mkdir()
    proc = _start(["run", str(long_workload), "--out", str(parent / "out")], tmp_path)
    _wait_for(lambda: any(".tmp-" in n for n in _entries(parent)), "the run to start")
    time.sleep(1.0)  # well into the simulation, helper processes forked
    helpers = _children(proc.pid)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "interrupted" in lines[0] and "nothing was written" in lines[0]
    assert _entries(parent) == [], "a temporary directory was left behind"
    if helpers:
        assert _alive(helpers) == [], "a helper process outlived the run"


def test_sigkill_of_a_run_takes_its_helpers_with_it(long_workload: Path, tmp_path: Path) -> None:
    """Helpers die with their parent (parent-death signal), even when it is SIGKILLed."""
    parent = tmp_path / "runs"
    parent.mkdir()
    proc = _start(["run", str(long_workload), "--out", str(parent / "out")], tmp_path)
    _wait_for(lambda: any(".tmp-" in n for n in _entries(parent)), "the run to start")
    _wait_for(lambda: bool(_children(proc.pid)), "helper processes")
    helpers = _children(proc.pid)
    proc.kill()
    proc.communicate(timeout=30)
    _wait_for(lambda: not _alive(helpers), "the helpers to exit", timeout=30)


def test_signal_keeps_an_earlier_run(small: Path, long_workload: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_sim(small, out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    proc = _start(["run", str(long_workload), "--out", str(out)], tmp_path)
    _wait_for(lambda: any(".tmp-" in n for n in _entries(tmp_path)), "the run to start")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "earlier run there is unchanged" in err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert _entries(tmp_path) == ["long.yaml", "out", "small.yaml"]


# Row 5: SIGKILL of a sweep: no worker survives, no temporary directory, a rerun completes.
SWEEP_WORKLOAD = {
    **SMALL,
    "arrival": {"type": "poisson", "rate": 40.0},
    "num_requests": 4000,
    "prompt_len": 400,
    "output_len": 120,
}


def _start_sweep(tmp_path: Path) -> tuple[subprocess.Popen[str], Path, Path, list[int]]:
    """A 4-point sweep on 2 workers, once a point is being written: ``(process, spec,
    sweep directory, worker pids)``."""
    workload = write_yaml(tmp_path / "w.yaml", SWEEP_WORKLOAD)
    spec = write_yaml(
        tmp_path / "sweep.yaml",
        {
            "name": "signals",
            "base": {"workload": str(workload)},
            "axes": [{"path": "workload.arrival.rate", "values": [10, 20, 30, 40]}],
        },
    )
    out = tmp_path / "sweep"
    proc = _start(["sweep", str(spec), "--out", str(out), "--jobs", "2"], tmp_path)
    points = out / "points"
    _wait_for(
        lambda: points.is_dir() and any(".tmp-" in n for n in _entries(points)),
        "a point to start",
    )
    workers = _children(proc.pid)
    assert workers, "no worker processes"
    return proc, spec, out, workers


def test_sigkill_of_sweep_leaves_no_worker_and_reruns_cleanly(tmp_path: Path) -> None:
    proc, spec, out, workers = _start_sweep(tmp_path)
    points = out / "points"
    proc.kill()
    proc.communicate(timeout=30)
    _wait_for(lambda: not _alive(workers), "the workers to exit", timeout=30)
    # A worker's cleanup waits for its run's helper processes; on a loaded 2-core
    # machine that once took just over 30 s (the whole test takes about 7 s alone).
    _wait_for(
        lambda: not [n for n in _entries(points) if n.startswith(".")],
        "the workers' temporary directories to go",
        timeout=90,
    )
    done = sum((p / "summary.json").is_file() for p in points.iterdir())
    assert done < 4, "the kill came too late"
    result = run_sweep(spec, out, jobs=2, render=False)
    assert result.skipped == done and sum(result.statuses.values()) == 4 - done
    with (out / "sweep.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["point_id"] for r in rows) == sorted({r["point_id"] for r in rows})
    assert len(rows) == 4 and {r["status"] for r in rows} == {"ok"}


# kvsim calibrate: the YAML and CSV it writes (checked before profiling; no torch needed).
def test_calibrate_refuses_to_overwrite_files_it_did_not_write(tmp_path: Path) -> None:
    from calibrate.harness.output_files import check_outputs, write_atomically

    out = tmp_path / "cal.yaml"
    check_outputs(out)  # nothing there yet
    _user_file(out)
    with pytest.raises(ValueError, match="--out .*cal.yaml.*not written by kvsim"):
        check_outputs(out)
    check_outputs(out, force=True)
    out.write_text("schema_version: 1\nlatency: {}\n")  # a calibration file: replaceable
    check_outputs(out)
    _user_file(tmp_path / "cal.csv")
    with pytest.raises(ValueError, match="cal.csv exists"):
        check_outputs(out)
    (tmp_path / "cal.csv").unlink()
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        check_outputs(tmp_path / "dir.yaml")
    with pytest.raises(ValueError, match="cannot write"):
        check_outputs(tmp_path / "cal.yaml" / "x.yaml")

    def interrupted_write(tmp: Path) -> None:
        tmp.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(out, interrupted_write)
    assert out.read_text() == "schema_version: 1\nlatency: {}\n"
    assert _entries(tmp_path) == ["cal.yaml", "dir.yaml"]


def test_calibrate_cli_checks_out_before_profiling(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="torch not installed (calibrate extra)")
    target = _user_file(tmp_path / "cal.yaml")
    proc = kvsim_cli("calibrate", "--quick", "--out", str(target))
    _one_error_line(proc, "--out", "cal.yaml", "--force")
    assert target.read_bytes() == USER_BYTES
    assert _entries(tmp_path) == ["cal.yaml"]


def test_sigterm_of_sweep_stops_its_workers_and_says_what_was_kept(tmp_path: Path) -> None:
    proc, _, out, workers = _start_sweep(tmp_path)
    points = out / "points"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "Traceback" not in err, err
    assert [line for line in err.splitlines() if line.strip()] == [
        f"kvsim: interrupted (SIGTERM); finished points are kept in {out}, "
        "rerun the same command to resume"
    ]
    assert _alive(workers) == []
    assert not [n for n in _entries(points) if n.startswith(".")]
