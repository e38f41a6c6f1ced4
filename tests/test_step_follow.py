"""A ``steps.csv`` read while it is written (:mod:`reports.step_follow`) gives what
reading the finished file gives (:func:`reports.step_stream.read_step_rows`): the same
notes, rows and binned series, bit for bit, whatever the pieces it was written in and
however often it was polled; or nothing, and the report reads the file itself."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from reports import step_follow, step_stream
from reports.run_records import STEP_OPTIONAL_COLUMNS, STEP_PLOT_COLUMNS, read_step_records
from reports.step_follow import StepFollower
from tests.test_step_stream import DAMAGE, USABLE, _assert_same_bins, _write_steps


def _from_file(path: Path, expected: int) -> step_stream.StepRows:
    return step_stream.read_step_rows(
        path, STEP_PLOT_COLUMNS, STEP_OPTIONAL_COLUMNS, expected, "steps"
    )


def _followed(path: Path, text: str, seed: int, polls: int) -> step_stream.StepRows | None:
    """``text`` written to ``path`` in ``polls`` random pieces, polled after each."""
    data = text.encode()
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), polls - 1)) if polls > 1 else []
    follower = StepFollower(path)
    follower.poll()  # before the file exists
    with path.open("wb") as f:
        for lo, hi in zip([0, *cuts], [*cuts, len(data)]):
            f.write(data[lo:hi])
            f.flush()
            follower.poll()
    return follower.rows(path, 200, "steps")


@pytest.mark.parametrize("keep_rows", [0, 1 << 20])
@pytest.mark.parametrize("polls", [1, 7, 60])
@pytest.mark.parametrize("case", list(DAMAGE))
def test_following_gives_the_file_reading(tmp_path, monkeypatch, case, polls, keep_rows) -> None:
    source = tmp_path / "source.csv"
    _write_steps(source)
    text = DAMAGE[case](source.read_text())
    monkeypatch.setattr(step_follow, "BLOCK_BYTES", 512)  # many blocks
    monkeypatch.setattr(step_stream, "KEEP_ROWS", keep_rows)
    path = tmp_path / "steps.csv"
    followed = _followed(path, text, seed=polls, polls=polls)
    whole = _from_file(path, 200)
    if case == "too-many-fields":  # the parser leaves such lines out: not followed
        assert followed is None
        return
    assert followed is not None  # it did the reading
    assert followed.notes == whole.notes
    assert (followed.num_rows, followed.rows_read, followed.drop_last) == (
        whole.num_rows,
        whole.rows_read,
        whole.drop_last,
    )
    assert followed.last_s == whole.last_s
    assert followed.rows_per_replica == whole.rows_per_replica
    assert (followed.kept is None) == (whole.kept is None) == (keep_rows == 0)
    for end_s in (None, 100.0):
        _assert_same_bins(followed.binned(USABLE, end_s), whole.binned(USABLE, end_s))


def test_another_file_by_that_name_is_read_again(tmp_path) -> None:
    path = tmp_path / "steps.csv"
    _write_steps(path)
    follower = StepFollower(path)
    follower.poll()
    replaced = tmp_path / "other.csv"
    _write_steps(replaced, rows=150, seed=1)
    os.replace(replaced, path)  # another file by that name
    assert follower.rows(path, 200, "steps") is None
    rows, notes = read_step_records(tmp_path, {"num_steps": 200}, follower)
    assert rows.num_rows == 150 and "150 of 200" in " ".join(notes)


def test_a_follower_answers_once(tmp_path) -> None:
    path = tmp_path / "steps.csv"
    _write_steps(path)
    follower = StepFollower(path)
    assert follower.rows(path, 200, "steps") is not None
    with path.open("a") as f:  # the file grows afterwards
        f.write(path.read_text().splitlines()[1] + "\n")
    assert follower.rows(path, 200, "steps") is None
    rows, notes = read_step_records(tmp_path, {"num_steps": 200}, follower)
    assert rows.num_rows == 201 and "201 of 200" in " ".join(notes)


def test_nothing_to_follow_reads_the_file(tmp_path) -> None:
    follower = StepFollower(tmp_path / "steps.csv")
    follower.poll()
    _write_steps(tmp_path / "steps.csv")  # written after the last poll
    rows, notes = read_step_records(tmp_path, {"num_steps": 200}, follower)
    assert rows.num_rows == 200 and notes == []
