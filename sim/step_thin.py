"""``steps.csv`` for long runs: thinned to a bounded number of rows, or not written.

``kvsim run --steps`` chooses (:data:`STEP_MODES`):

- ``full`` (default): one row per engine step of each replica (:mod:`sim.step_rows`);
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
from itertools import accumulate
from pathlib import Path
from typing import IO, Any

from sim.step_rows import DECODE, StepChunk, fmt

STEP_MODES = ("full", "thin", "none")
"""The values of ``kvsim run --steps`` (and a sweep's or plan's ``steps``)."""
THIN_MAX_ROWS = 20_000
"""The most rows a thinned ``steps.csv`` holds (about 1.5 MB)."""
START_WIDTH_S = 2.0**-20
"""The first bucket width (s); a power of two, so halving bucket ids is exact."""

_COUNTS = (3, 6, 7, 8, 12, 13)  # duration_s and the counted columns: summed
_ROW = ",".join(["%s"] * 15) + "\n"


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
        ``csv`` or ``parquet`` (:mod:`sim.step_parquet`)."""
        max_rows = THIN_MAX_ROWS if max_rows is None else max_rows
        if max_rows < 1:
            raise ValueError(f"max_rows: must be >= 1 (got {max_rows})")
        self._file: IO[str] | None = None
        self._parquet: Any = None
        if fmt == "parquet":
            from sim.step_parquet import ParquetRowSink

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
        durations = chunk.durations.tolist()
        at = 0
        for item in chunk.items:
            if item[0] != DECODE:
                self._add(list(item))
                continue
            end = at + item[4]
            self._add_decode(item, durations[at:end], chunk, at)
            at = end
        self._shrink()

    def _add(self, row: list[Any]) -> None:
        key = (int(row[2] // self.width_s), row[0])
        have = self._rows.get(key)
        if have is None:
            self._rows[key] = row
            return
        for i in _COUNTS:
            have[i] += row[i]

    def _add_decode(
        self, item: tuple[Any, ...], durations: list[float], chunk: StepChunk, at: int
    ) -> None:
        """The steps of one decode stretch (see :mod:`sim.step_rows`), a bucket at a time."""
        _, replica, step0, start0, k, batch, last_running, usable = item
        starts = list(accumulate(durations[:-1], initial=start0))  # as the recorder sums
        width = self.width_s
        i = 0
        while i < k:
            # The stretch's steps before the next bucket's start (exact: width is a
            # power of two).
            j = bisect_left(starts, (starts[i] // width + 1) * width, i + 1)
            free = chunk.free[at + i]
            usage = 1.0 - free / usable if usable else 0.0
            running = batch if i < k - 1 else last_running
            row = [
                replica,
                step0 + i,
                starts[i],
                sum(durations[i:j]),
                running,
                0,
                0,
                batch * (j - i),
                0,
                usage,
                free,
                chunk.cached[at + i],
                0,
                0,
                chunk.cached_free[at + i],
            ]
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
            texts = []
            for row in self._rows.values():
                row[2], row[3], row[9] = fmt(row[2]), fmt(row[3]), fmt(row[9])
                texts.append(_ROW % tuple(row))
            self._file.write("".join(texts))
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
