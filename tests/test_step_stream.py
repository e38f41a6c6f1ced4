"""``steps.csv`` checked and binned in chunks (:mod:`reports.step_stream`) gives the
whole-file reading's notes and the same binned series, bit for bit, on intact and
damaged files, with chunk boundaries anywhere; and the report does not hold the rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reports import run_records, step_stream
from reports.run_records import (
    STEP_OPTIONAL_COLUMNS,
    STEP_PLOT_COLUMNS,
    read_request_records,
    read_step_records,
)
from reports.step_bins import bin_steps
from sim.records.recorders import STEP_COLUMNS

USABLE = 999


def _write_steps(path: Path, rows: int = 200, replicas: int = 2, seed: int = 0) -> None:
    """A steps file as kvsim writes it: replicas interleaved, each in start order."""
    rng = np.random.default_rng(seed)
    data = {c: rng.integers(0, 50, rows) for c in STEP_COLUMNS}
    data["replica"] = np.arange(rows) % replicas
    data["step"] = np.arange(rows) // replicas
    data["duration_s"] = rng.uniform(0.001, 0.05, rows)
    data["start_s"] = np.cumsum(data["duration_s"]) / replicas
    data["kv_usage"] = rng.uniform(0, 1, rows)
    data["num_preempted"] = rng.integers(0, 3, rows)
    lines = [",".join(STEP_COLUMNS)]
    for i in range(rows):
        lines.append(",".join(f"{data[c][i]:.9g}" for c in STEP_COLUMNS))
    path.write_text("\n".join(lines) + "\n")


def _cut_mid_line(text: str) -> str:
    end = text.index("\n", len(text) // 2)
    return text[: end - 3]


def _garble(text: str) -> str:
    lines = text.splitlines(keepends=True)
    fields = lines[57].split(",")
    fields[2] = "12..5"
    lines[57] = ",".join(fields)
    return "".join(lines)


def _extra_field(text: str) -> str:
    lines = text.splitlines(keepends=True)
    lines[31] = lines[31].rstrip("\n") + ",7\n"
    return "".join(lines)


def _short_line(text: str) -> str:
    lines = text.splitlines(keepends=True)
    lines[90] = ",".join(lines[90].split(",")[:5]) + "\n"
    return "".join(lines)


DAMAGE = {
    "intact": lambda t: t,
    "cut-mid-line": _cut_mid_line,
    "no-final-newline": lambda t: t.rstrip("\n"),
    "rows-missing": lambda t: "".join(t.splitlines(keepends=True)[:-5]),
    "unparsable": _garble,
    "too-many-fields": _extra_field,
    "too-few-fields": _short_line,
    "blank-line": lambda t: t.replace("\n", "\n\n", 1),
}


def _assert_same_bins(a, b) -> None:
    assert (a is None) == (b is None)
    if a is None:
        return
    assert a.replicas == b.replicas
    assert np.array_equal(a.edges, b.edges)
    for name in ("kv", "kv_max", "cached_free", "running", "waiting", "preempted"):
        for x, y in zip(getattr(a, name), getattr(b, name), strict=True):
            assert x.tobytes() == y.tobytes(), name  # bit for bit


@pytest.mark.parametrize("keep_rows", [0, 1 << 20])  # read again when binned / kept
@pytest.mark.parametrize("chunk_rows", [13, 1 << 17])
@pytest.mark.parametrize("case", list(DAMAGE))
def test_chunks_match_whole_file(tmp_path, monkeypatch, case, chunk_rows, keep_rows) -> None:
    path = tmp_path / "steps.csv"
    _write_steps(path)
    path.write_text(DAMAGE[case](path.read_text()))
    whole, notes = run_records._read_one(
        path, STEP_PLOT_COLUMNS, STEP_OPTIONAL_COLUMNS, 200, "steps"
    )
    monkeypatch.setattr(step_stream, "CHUNK_ROWS", chunk_rows)
    monkeypatch.setattr(step_stream, "KEEP_ROWS", keep_rows)
    rows = step_stream.read_step_rows(path, STEP_PLOT_COLUMNS, STEP_OPTIONAL_COLUMNS, 200, "steps")
    assert (rows.kept is None) == (keep_rows == 0)
    assert rows.notes == notes
    assert rows.num_rows == len(whole)
    for end_s in (None, 100.0):
        _assert_same_bins(rows.binned(USABLE, end_s), bin_steps(whole, USABLE, end_s))


@pytest.mark.parametrize("keep_rows", [0, 1 << 20])
def test_kept_rows_are_the_whole_file_rows(tmp_path, monkeypatch, keep_rows) -> None:
    path = tmp_path / "steps.csv"
    _write_steps(path, rows=200, replicas=1)
    path.write_text(_garble(_cut_mid_line(path.read_text())))
    whole, _ = run_records._read_one(path, STEP_PLOT_COLUMNS, STEP_OPTIONAL_COLUMNS, 200, "steps")
    monkeypatch.setattr(step_stream, "CHUNK_ROWS", 8)
    monkeypatch.setattr(step_stream, "KEEP_ROWS", keep_rows)
    rows = step_stream.read_step_rows(path, STEP_PLOT_COLUMNS, STEP_OPTIONAL_COLUMNS, 200, "steps")
    got = pd.concat(list(rows.chunks()), ignore_index=True)
    want = whole[rows.numeric].reset_index(drop=True)
    assert np.array_equal(got.to_numpy(np.float64), want.to_numpy(np.float64))


def test_report_records_do_not_hold_step_rows(tmp_path, monkeypatch) -> None:
    """What the report keeps of a steps.csv past KEEP_ROWS rows is a fixed set of
    counts, not its rows."""
    monkeypatch.setattr(step_stream, "KEEP_ROWS", 299)
    _write_steps(tmp_path / "steps.csv", rows=300)
    (tmp_path / "requests.csv").write_text(
        "request_id,replica,arrival_s,first_token_s,finish_s,prompt_tokens,"
        "output_tokens,cached_tokens,num_preemptions\nr0,0,0.1,0.2,0.5,10,4,0,0\n"
    )
    summary = {"num_steps": 300, "num_finished": 1}
    steps, step_notes = read_step_records(tmp_path, summary)
    _, request_notes = read_request_records(tmp_path, summary)
    assert isinstance(steps, step_stream.StepRows)
    assert steps.num_rows == 300 and step_notes + request_notes == []
    assert steps.kept is None
    assert not any(isinstance(v, pd.DataFrame | np.ndarray) for v in vars(steps).values())


def test_empty_and_missing(tmp_path) -> None:
    path = tmp_path / "steps.csv"
    path.write_text(",".join(STEP_COLUMNS) + "\n")
    rows = step_stream.read_step_rows(path, STEP_PLOT_COLUMNS, STEP_OPTIONAL_COLUMNS, 0, "steps")
    assert rows.empty and rows.binned(USABLE) is None and rows.notes == []
    path.write_text("")
    with pytest.raises(run_records.RunRecordsError, match="empty"):
        step_stream.read_step_rows(path, STEP_PLOT_COLUMNS, STEP_OPTIONAL_COLUMNS, 0, "steps")
    path.write_text("replica,begin_s\n0,1\n")
    with pytest.raises(run_records.RunRecordsError, match="start_s"):
        step_stream.read_step_rows(path, STEP_PLOT_COLUMNS, STEP_OPTIONAL_COLUMNS, 0, "steps")


def test_as_numbers_is_to_numeric_with_or_without_text() -> None:
    """Columns parsed as numbers are kept as they are; any other column makes the whole
    frame go through pd.to_numeric (errors coerced), as before the shortcut."""
    from reports.run_records import as_numbers

    numbers = pd.DataFrame({"a": [1, 2, 3], "b": [0.5, np.nan, 2.0]})
    mixed = pd.DataFrame({"a": [1, 2, 3], "b": ["0.5", "x", "2"]})
    for frame in (numbers, mixed):
        expected = frame.apply(pd.to_numeric, errors="coerce")
        pd.testing.assert_frame_equal(as_numbers(frame), expected)
    assert as_numbers(numbers) is numbers
    assert np.isnan(as_numbers(mixed)["b"].iloc[1])
