"""``steps.parquet``: the step rows as a Parquet file (``--steps-format parquet``).

The same columns as ``steps.csv`` (:data:`sim.records.recorders.STEP_COLUMNS`), integers as
int64 and times and KV usage as float64 at full precision (the CSV holds 9
significant digits); one row group per chunk the recorder hands over. Needs pyarrow
(the optional ``parquet`` extra: ``pip install 'kvsim[parquet]'``); the CSV stays the
default. Written in the simulating process (no helper: pyarrow's threads do not
survive a fork). Same inputs and pyarrow version, same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.records.step_row import FLOAT_COLUMNS, STEP_COLUMNS, DecodeRows
from sim.records.step_rows import StepChunk, chunk_items

STEP_FORMATS = ("csv", "parquet")
"""The values of ``--steps-format``."""


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


def chunk_columns(chunk: StepChunk) -> list[list[Any]]:
    """The rows of ``chunk`` as column lists, in ``STEP_COLUMNS`` order (decode
    stretches expanded with :meth:`sim.records.step_row.DecodeRows.columns`)."""
    cols: dict[str, list[Any]] = {c: [] for c in STEP_COLUMNS}
    order = list(cols.values())
    for item in chunk_items(chunk):
        if isinstance(item, DecodeRows):
            for name, values in item.columns().items():
                cols[name] += values
        else:
            for col, value in zip(order, item):
                col.append(value)
    return order


class ParquetRowSink:
    """Writes column lists to ``path`` as Parquet row groups; the file is created at
    once (a bad path fails before the run)."""

    def __init__(self, path: Path, columns: tuple[str, ...]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._pa = pa
        self.columns = columns
        fields = [pa.field(c, pa.float64() if c in FLOAT_COLUMNS else pa.int64()) for c in columns]
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
        self._sink.write_columns(chunk_columns(chunk))

    def close(self) -> None:
        self._sink.close()
