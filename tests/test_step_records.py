"""Typed step records: ``StepRow`` is ``steps.csv``'s layout, and a ``DecodeRows``
stretch is written as its rows one by one would be (CSV text, thinned rows, Parquet
columns, the recorder's kept columns). That fast-forwarded and stepped runs write the
same bytes is tests/test_fast_forward.py's."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import yaml

from kvcore.block_pool import BlockPool
from sim.records.recorders import STEP_COLUMNS, StepRecorder
from sim.records.step_row import DecodeRows, StepRow
from sim.records.step_rows import StepChunk, StepRowWriter, row_text
from sim.records.step_thin import ThinStepWriter


def _stretch(rng: random.Random, usable: int | None = None) -> DecodeRows:
    k = rng.randint(1, 12)
    usable = rng.choice([0, 7, 100, 1023]) if usable is None else usable
    batch = rng.randint(1, 9)
    return DecodeRows(
        replica=rng.randint(0, 3),
        step0=rng.randint(0, 10_000),
        start0_s=rng.uniform(0, 100),
        batch=batch,
        last_running=rng.randint(0, batch),
        num_usable_blocks=usable,
        durations=[rng.uniform(1e-4, 0.1) for _ in range(k)],
        num_free_blocks=[rng.randint(0, usable) for _ in range(k)],
        num_cached_blocks=[rng.randint(0, 50) for _ in range(k)],
        num_cached_free_blocks=[rng.randint(0, 50) for _ in range(k)],
    )


def _rows(stretch: DecodeRows) -> list[StepRow]:
    return [stretch.row(j, s) for j, s in enumerate(stretch.starts())]


def _row(rng: random.Random) -> StepRow:
    return StepRow(
        *(rng.uniform(0, 9) if i in (2, 3, 9) else rng.randint(0, 99) for i in range(15))
    )


def test_step_row_fields_are_the_header_of_a_run(tmp_path: Path) -> None:
    from sim.app.run import RunSpec, simulate
    from sim.app.setup import resolve_run

    wl = {"name": "h", "seed": 1, "num_requests": 3, "prompt_len": 20, "output_len": 4}
    wl["arrival"] = {"type": "burst"}
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump(wl))
    resolved = resolve_run(RunSpec(workload=str(tmp_path / "wl.yaml")))
    (tmp_path / "out").mkdir()
    simulate(resolved, tmp_path / "out", helpers=False)
    header = (tmp_path / "out" / "steps.csv").read_text().splitlines()[0]
    assert header.split(",") == list(STEP_COLUMNS)
    assert STEP_COLUMNS[-1] == "num_cached_free_blocks"  # kvsim's extension comes last


def test_step_row_holds_the_columns_in_order() -> None:
    """Every column is a keyword and a field of StepRow, and values() lists them in
    STEP_COLUMNS order."""
    row = StepRow(**{c: i for i, c in enumerate(STEP_COLUMNS)})
    assert tuple(getattr(row, c) for c in STEP_COLUMNS) == tuple(range(15))
    assert row.values() == tuple(range(15))


def test_head_round_trips() -> None:
    rng = random.Random(3)
    for _ in range(20):
        s = _stretch(rng)
        lists = (s.durations, s.num_free_blocks, s.num_cached_blocks, s.num_cached_free_blocks)
        pad = [[-1] * 3 + x + [-1] * 2 for x in lists]  # other stretches' values around
        again = DecodeRows.from_head(s.head(), 3, *pad)
        assert again.head() == s.head()
        assert [r.values() for r in _rows(again)] == [r.values() for r in _rows(s)]


def test_a_stretch_is_written_as_its_rows(tmp_path: Path) -> None:
    """CSV text, thinned rows and Parquet columns of stretches equal those of their
    rows (and of rows between them) given one at a time."""
    rng = random.Random(7)
    bulk, single = StepChunk(), StepChunk()
    rows: list[StepRow] = []
    for _ in range(60):
        if rng.random() < 0.3:
            row = _row(rng)
            bulk.items.append(row.values())
            rows.append(row)
            continue
        s = _stretch(rng)
        bulk.items.append(s.head())
        bulk.durations.extend(s.durations)
        bulk.free.extend(s.num_free_blocks)
        bulk.cached.extend(s.num_cached_blocks)
        bulk.cached_free.extend(s.num_cached_free_blocks)
        rows += _rows(s)
    single.items += [r.values() for r in rows]
    for chunk, name in ((bulk, "bulk.csv"), (single, "single.csv")):
        writer = StepRowWriter(tmp_path / name, STEP_COLUMNS)
        writer.write(chunk)
        writer.close()
    text = (tmp_path / "bulk.csv").read_text()
    assert text == (tmp_path / "single.csv").read_text()
    assert text.splitlines()[1:] == [row_text(r.values()).rstrip("\n") for r in rows]
    for chunk, name in ((bulk, "tb.csv"), (single, "ts.csv")):
        thin = ThinStepWriter(tmp_path / name, STEP_COLUMNS, max_rows=50)
        thin.write(chunk)
        thin.close()
    assert (tmp_path / "tb.csv").read_text() == (tmp_path / "ts.csv").read_text()
    pytest.importorskip("pyarrow")
    from sim.records.step_parquet import chunk_columns

    assert chunk_columns(bulk) == chunk_columns(single)


def test_recorder_keeps_a_stretch_as_its_rows(tmp_path: Path) -> None:
    rng = random.Random(11)
    bulk = StepRecorder(tmp_path / "a.csv", num_replicas=2)
    single = StepRecorder(tmp_path / "b.csv", num_replicas=2)
    for _ in range(30):
        s = _stretch(rng)
        bulk.add_decode_steps(s)
        for row in _rows(s):
            single.add(row)
    bulk.close()
    single.close()
    for name in ("start_s", "duration_s", "kv_usage", "replica"):
        assert getattr(bulk, name) == getattr(single, name), name
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()


def test_usage_is_the_pools() -> None:
    pool = BlockPool(9, enable_caching=True)
    assert pool.get_usage() == BlockPool.usage_at(8, 8) == 0.0
    blocks = pool.get_new_blocks(3)
    assert pool.get_usage() == BlockPool.usage_at(5, 8) == 1.0 - 5 / 8
    pool.free_blocks(blocks)
    assert BlockPool.usage_at(0, 0) == 0.0


@pytest.mark.parametrize("mode", ["full", "thin", "none"])
def test_finish_hands_over_every_row_and_close_only_waits(tmp_path: Path, mode: str) -> None:
    """A run ends its steps file with ``finish`` and computes its summary (which reads
    ``file_info``) while the helper writes on; ``close`` then waits. Info and bytes are
    those of a recorder closed at once, without a helper."""
    rng = random.Random(5)
    rows = [_row(rng) for _ in range(9000)]  # more than a chunk
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ended = StepRecorder(tmp_path / "a" / "steps.csv", helper=hasattr(os, "fork"), mode=mode)
    closed = StepRecorder(tmp_path / "b" / "steps.csv", mode=mode)
    for row in rows:
        ended.add(row)
        closed.add(row)
    ended.finish()
    info = ended.file_info()
    ended.close()
    closed.close()
    assert info == closed.file_info()
    a, b = (tmp_path / d / "steps.csv" for d in "ab")
    assert a.exists() == b.exists()
    if a.exists():
        assert a.read_bytes() == b.read_bytes()
