"""``kvsim run``'s trace read ahead in a helper process (:mod:`sim.app.trace_ahead`): the
same table as reading in process, the same error for a bad trace, a fresh read when the
file changed, nothing started where it does not apply."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

from sim import offload
from sim.app import trace_ahead
from workloads.errors import WorkloadError
from workloads.traces.detect import read_trace as read_in_process

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "chat-trace.jsonl"

needs_helpers = pytest.mark.skipif(
    not offload.allowed(), reason="helper processes need fork and two CPUs"
)


@pytest.fixture(autouse=True)
def _no_leftovers(monkeypatch):
    # Helpers on whatever an earlier test in this process set (recommend's workers
    # turn them off in their environment).
    monkeypatch.delenv(offload.ENV_SWITCH, raising=False)
    trace_ahead.stop_all()
    yield
    trace_ahead.stop_all()


def _same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and (a.dtype == b.dtype and np.array_equal(a, b))
        )
    return a == b


def _forbid_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the fork: a table that still comes back came from the helper."""

    def fail(*_: object) -> None:
        raise AssertionError("read in process")

    monkeypatch.setattr(trace_ahead, "read_in_process", fail)


@needs_helpers
def test_the_helper_reads_the_same_table(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "t.jsonl"
    shutil.copy(EXAMPLE, path)
    trace_ahead.start(str(path))
    assert trace_ahead.pending() == [str(path)]
    _forbid_in_process(monkeypatch)
    table = trace_ahead.read_trace(path, str(path))
    assert trace_ahead.pending() == []
    expected = read_in_process(path, str(path))
    for f in dataclasses.fields(expected):
        assert _same(getattr(table, f.name), getattr(expected, f.name)), f.name
    assert len(table) == 40


@needs_helpers
def test_a_bad_trace_raises_what_reading_in_process_raises(tmp_path: Path, capfd) -> None:
    path = tmp_path / "bad.jsonl"
    lines = EXAMPLE.read_text().splitlines()
    lines[3] = lines[3].replace('"output_tokens": ', '"output_tokens": -')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(WorkloadError) as expected:
        read_in_process(path, str(path))
    trace_ahead.start(str(path))
    with pytest.raises(WorkloadError) as got:
        trace_ahead.read_trace(path, str(path))
    assert str(got.value) == str(expected.value)
    assert "line 4" in str(got.value)
    assert "Traceback" not in capfd.readouterr().err  # the helper stays quiet


@needs_helpers
def test_a_file_changed_after_the_start_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    shutil.copy(EXAMPLE, path)
    trace_ahead.start(str(path))
    path.write_text("".join(EXAMPLE.read_text().splitlines(keepends=True)[:7]))
    assert len(trace_ahead.read_trace(path, str(path))) == 7


@needs_helpers
def test_another_label_or_path_is_read_in_process(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "t.jsonl"
    shutil.copy(EXAMPLE, path)
    trace_ahead.start(str(path))
    calls: list[object] = []
    monkeypatch.setattr(
        trace_ahead, "read_in_process", lambda p, f=None: calls.append((p, f)) or "x"
    )
    assert trace_ahead.read_trace(path, "other label") == "x"
    assert calls == [(path, "other label")]
    assert trace_ahead.pending() == [str(path)]  # still there, stopped at exit


def test_nothing_starts_where_it_does_not_apply(tmp_path: Path, monkeypatch) -> None:
    yaml_file = tmp_path / "w.yaml"
    yaml_file.write_text("name: w\n")
    for workload in ("chat", str(yaml_file), str(tmp_path / "missing.jsonl")):
        trace_ahead.start(workload)
    assert trace_ahead.pending() == []
    path = tmp_path / "t.jsonl"
    shutil.copy(EXAMPLE, path)
    monkeypatch.setenv(offload.ENV_SWITCH, "0")
    trace_ahead.start(str(path))
    assert trace_ahead.pending() == []
    assert len(trace_ahead.read_trace(path, str(path))) == 40


@needs_helpers
def test_an_untaken_helper_is_stopped_and_reaped(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    shutil.copy(EXAMPLE, path)
    trace_ahead.start(str(path))
    reader = trace_ahead._pending[str(path)][0]
    pid = reader._pid
    trace_ahead.stop_all()
    assert trace_ahead.pending() == []
    with pytest.raises(ChildProcessError):
        import os

        os.waitpid(pid, 0)  # already reaped


@needs_helpers
def test_a_run_that_fails_before_its_read_leaves_no_helper(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from sim.cli import app

    path = tmp_path / "t.jsonl"
    shutil.copy(EXAMPLE, path)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(path), "--goodput", "nonsense", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert trace_ahead.pending() == []
    assert not out.exists()
