"""``steps.csv`` for long runs: thinned to a bounded number of rows, or not written.

``kvsim run --steps`` chooses (:data:`STEP_MODES`):

- ``full`` (default): one row per engine step of each replica (:mod:`sim.records.step_rows`);
- ``thin``: at most :data:`THIN_MAX_ROWS` rows (:class:`ThinStepWriter`), same
  columns. Time is cut into buckets of equal width, the same for every replica; each
  row covers one replica's steps that start in one bucket:

  - ``step``, ``start_s`` and the *levels* (``num_running``, ``num_waiting``,
    ``kv_usage``, ``num_free_blocks``, ``num_cached_blocks``,
    ``num_cached_free_blocks``) are those of the bucket's first step;
  - ``duration_s`` and the *counts* (``num_prefill_tokens``, ``num_decode_tokens``,
    ``num_preempted``, ``prefix_queries``, ``prefix_hits``) are summed over the
    bucket's steps, so totals (preemptions, tokens, prefix hits, busy time) are
    those of the full file.

  The width starts at 2**-20 s (below any step: a short run's rows are its steps)
  and doubles, merging pairs of buckets, whenever there are more rows than
  :data:`THIN_MAX_ROWS`; it ends at the smallest such width that fits. Rows are in
  the order of their first steps in the full file.
- ``none``: no ``steps.csv`` (the summary, verdict and ``requests.csv`` are complete;
  reports leave the step plots out and say so).

The run's ``summary.json`` says which (``steps_file``: ``mode``, ``rows``, and for
``thin`` the bucket width ``bucket_s`` and ``max_rows``); ``config.yaml`` records
``steps``. Same inputs, same bytes.
"""

from __future__ import annotations

from bisect import bisect_left
from pathlib import Path
from typing import IO, Any

from sim.records.step_row import STEP_COLUMNS, DecodeRows
from sim.records.step_rows import StepChunk, chunk_items, row_text

STEP_MODES = ("full", "thin", "none")
"""The values of ``kvsim run --steps`` (and a sweep's or plan's ``steps``)."""
THIN_MAX_ROWS = 20_000
"""The most rows a thinned ``steps.csv`` holds (about 1.5 MB)."""
START_WIDTH_S = 2.0**-20
"""The first bucket width (s); a power of two, so halving bucket ids is exact."""

SUMMED_COLUMNS = (
    "duration_s",
    "num_prefill_tokens",
    "num_decode_tokens",
    "num_preempted",
    "prefix_queries",
    "prefix_hits",
)
"""Columns summed over a bucket's steps (the others are its first step's)."""
_COUNTS = tuple(STEP_COLUMNS.index(c) for c in SUMMED_COLUMNS)
_START = STEP_COLUMNS.index("start_s")
_REPLICA = STEP_COLUMNS.index("replica")
_DURATION = STEP_COLUMNS.index("duration_s")
_DECODED = STEP_COLUMNS.index("num_decode_tokens")


def check_mode(mode: str, where: str = "--steps") -> str:
    """``mode`` when it is one of :data:`STEP_MODES`; ValueError naming ``where``."""
    if mode not in STEP_MODES:
        raise ValueError(f"{where}: unknown value {mode!r} (allowed: {', '.join(STEP_MODES)})")
    return mode


class NullStepWriter:
    """``--steps none``: takes chunks and writes nothing."""

    def write(self, chunk: StepChunk) -> None:
        """Drop ``chunk``."""

    def close(self) -> None:
        """Nothing to close."""

    def info(self) -> dict[str, Any]:
        """``summary.json``'s ``steps_file``."""
        return {"mode": "none", "rows": 0}


class ThinStepWriter:
    """``--steps thin``: buckets step rows (see the module docstring) and writes them
    to ``path`` at :meth:`close`; the file is created (header only) at once, so a bad
    path fails before the run."""

    def __init__(
        self,
        path: Path,
        columns: tuple[str, ...],
        max_rows: int | None = None,
        fmt: str = "csv",
    ):
        """``max_rows``: None for :data:`THIN_MAX_ROWS` (read when called); ``fmt``:
        ``csv`` or ``parquet`` (:mod:`sim.records.step_parquet`)."""
        max_rows = THIN_MAX_ROWS if max_rows is None else max_rows
        if max_rows < 1:
            raise ValueError(f"max_rows: must be >= 1 (got {max_rows})")
        self._file: IO[str] | None = None
        self._parquet: Any = None
        if fmt == "parquet":
            from sim.records.step_parquet import ParquetRowSink

            self._parquet = ParquetRowSink(path, columns)
        else:
            self._file = path.open("w", newline="")
            self._file.write(",".join(columns) + "\n")
            self._file.flush()
        self.fmt = fmt
        self.max_rows = max_rows
        self.width_s = START_WIDTH_S
        self._rows: dict[tuple[int, int], list[Any]] = {}  # (bucket, replica) -> row
        self._closed = False

    def write(self, chunk: StepChunk) -> None:
        """Add the steps of ``chunk`` to their buckets."""
        for item in chunk_items(chunk):
            if isinstance(item, DecodeRows):
                self._add_decode(item)
            else:
                self._add(list(item))
        self._shrink()

    def _add(self, row: list[Any]) -> None:
        key = (int(row[_START] // self.width_s), row[_REPLICA])
        have = self._rows.get(key)
        if have is None:
            self._rows[key] = row
            return
        for i in _COUNTS:
            have[i] += row[i]

    def _add_decode(self, rows: DecodeRows) -> None:
        """The steps of one decode stretch, a bucket at a time."""
        starts = rows.starts()
        durations = rows.durations
        k = len(durations)
        width = self.width_s
        i = 0
        while i < k:
            # The stretch's steps before the next bucket's start (exact: width is a
            # power of two).
            j = bisect_left(starts, (starts[i] // width + 1) * width, i + 1)
            row = list(rows.row(i, starts[i]).values())
            row[_DURATION] = sum(durations[i:j])
            row[_DECODED] = rows.batch * (j - i)
            self._add(row)
            i = j

    def _shrink(self) -> None:
        """Double the bucket width (merging pairs, earlier first) until the rows fit."""
        while len(self._rows) > self.max_rows:
            self.width_s *= 2
            merged: dict[tuple[int, int], list[Any]] = {}
            for (bucket, replica), row in self._rows.items():  # each replica in time order
                key = (bucket >> 1, replica)
                have = merged.get(key)
                if have is None:
                    merged[key] = row
                else:
                    for i in _COUNTS:
                        have[i] += row[i]
            self._rows = merged

    def close(self) -> None:
        """Write the rows (in the order of their first steps) and close the file."""
        if self._closed:
            return
        self._closed = True
        if self._parquet is not None:
            try:
                self._parquet.write_columns([list(c) for c in zip(*self._rows.values())])
            finally:
                self._parquet.close()
            return
        assert self._file is not None
        try:
            self._file.write("".join(row_text(row) for row in self._rows.values()))
        finally:
            self._file.close()

    def info(self) -> dict[str, Any]:
        """``summary.json``'s ``steps_file`` (after :meth:`close`)."""
        return {
            "mode": "thin",
            "rows": len(self._rows),
            "bucket_s": self.width_s,
            "max_rows": self.max_rows,
        }
