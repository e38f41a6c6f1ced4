"""``steps.parquet``: the step rows as a Parquet file (``--steps-format parquet``).

The same columns as ``steps.csv`` (:data:`sim.records.STEP_COLUMNS`), integers as
int64 and times and KV usage as float64 at full precision (the CSV holds 9
significant digits); one row group per chunk the recorder hands over. Needs pyarrow
(the optional ``parquet`` extra: ``pip install 'kvsim[parquet]'``); the CSV stays the
default. Written in the simulating process (no helper: pyarrow's threads do not
survive a fork). Same inputs and pyarrow version, same bytes.
"""

from __future__ import annotations

from itertools import accumulate
from pathlib import Path
from typing import Any

from sim.step_rows import DECODE, StepChunk

STEP_FORMATS = ("csv", "parquet")
"""The values of ``--steps-format``."""
_FLOATS = (2, 3, 9)  # start_s, duration_s, kv_usage


def check_format(fmt: str, where: str = "--steps-format") -> str:
    """``fmt`` when it is a known format and its library is there; ValueError naming
    ``where`` otherwise."""
    if fmt not in STEP_FORMATS:
        raise ValueError(f"{where}: unknown value {fmt!r} (allowed: {', '.join(STEP_FORMATS)})")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise ValueError(
                f"{where}: parquet needs pyarrow, which is not installed: "
                "pip install 'kvsim[parquet]' (or pyarrow), or leave the CSV default"
            ) from None
    return fmt


def chunk_columns(chunk: StepChunk, width: int) -> list[list[Any]]:
    """The rows of ``chunk`` as ``width`` column lists (decode stretches expanded as
    :class:`sim.step_rows.StepRowWriter` expands them)."""
    cols: list[list[Any]] = [[] for _ in range(width)]
    durations = chunk.durations.tolist()
    at = 0
    for item in chunk.items:
        if item[0] != DECODE:
            for col, value in zip(cols, item):
                col.append(value)
            continue
        _, replica, step0, start0, k, batch, last_running, usable = item
        d = durations[at : at + k]
        free = chunk.free[at : at + k].tolist()
        zeros = [0] * k
        cols[0] += [replica] * k
        cols[1] += range(step0, step0 + k)
        cols[2] += accumulate(d[:-1], initial=start0)
        cols[3] += d
        cols[4] += [batch] * (k - 1) + [last_running]
        cols[5] += zeros
        cols[6] += zeros
        cols[7] += [batch] * k
        cols[8] += zeros
        cols[9] += [1.0 - f / usable if usable else 0.0 for f in free]
        cols[10] += free
        cols[11] += chunk.cached[at : at + k].tolist()
        cols[12] += zeros
        cols[13] += zeros
        cols[14] += chunk.cached_free[at : at + k].tolist()
        at += k
    return cols


class ParquetRowSink:
    """Writes column lists to ``path`` as Parquet row groups; the file is created at
    once (a bad path fails before the run)."""

    def __init__(self, path: Path, columns: tuple[str, ...]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._pa = pa
        self.columns = columns
        fields = [
            pa.field(c, pa.float64() if i in _FLOATS else pa.int64()) for i, c in enumerate(columns)
        ]
        self._schema = pa.schema(fields)
        self._writer = pq.ParquetWriter(str(path), self._schema, compression="zstd")

    def write_columns(self, cols: list[list[Any]]) -> None:
        """Append one row group (skipped when empty)."""
        if not cols or not cols[0]:
            return
        arrays = [self._pa.array(c, type=f.type) for c, f in zip(cols, self._schema)]
        self._writer.write_table(self._pa.Table.from_arrays(arrays, schema=self._schema))

    def close(self) -> None:
        self._writer.close()


class ParquetStepWriter:
    """``--steps full --steps-format parquet``: every step's row, a row group per chunk."""

    def __init__(self, path: Path, columns: tuple[str, ...]) -> None:
        self._sink = ParquetRowSink(path, columns)

    def write(self, chunk: StepChunk) -> None:
        self._sink.write_columns(chunk_columns(chunk, len(self._sink.columns)))

    def close(self) -> None:
        self._sink.close()
