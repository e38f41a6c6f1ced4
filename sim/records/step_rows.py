"""``steps.csv`` text from raw step values: the half of :class:`sim.records.recorders.StepRecorder`
that may run in a helper process (:mod:`sim.offload`), and the one formatter of a row.

The recorder hands over :class:`StepChunk` s: items in row order, each either

- a *step*: :meth:`sim.records.step_row.StepRow.values` (``STEP_COLUMNS`` order; floats
  unformatted);
- a *decode stretch*: :meth:`sim.records.step_row.DecodeRows.head` (tagged ``DECODE``), whose
  per-step durations and block counts are the next values of the chunk's arrays
  (compact: they pickle as bytes); :func:`chunk_items` makes it a
  :class:`sim.records.step_row.DecodeRows` again.

:class:`StepRowWriter` turns each chunk into text and writes it; where that runs does
not change a byte. :func:`row_text` is a row's line (also that of a thinned row).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from itertools import chain
from pathlib import Path
from typing import IO, Any

from kvcore.block_pool import BlockPool
from sim.records.step_row import DECODE, FLOAT_COLUMNS, STEP_COLUMNS, DecodeRows


def fmt(x: float) -> str:
    """Floats with 9 significant digits: stable text, byte-identical across runs."""
    return format(x, ".9g")


_LINE = ",".join(["%s"] * len(STEP_COLUMNS)) + "\n"  # str() of each value, as csv.writer
_ROW = ",".join("%.9g" if c in FLOAT_COLUMNS else "%s" for c in STEP_COLUMNS) + "\n"


def row_text(values: Sequence[Any]) -> str:
    """The ``steps.csv`` line of one row's values (``STEP_COLUMNS`` order): floats
    as :func:`fmt` writes them ("%.9g" is its format, applied in C), everything else as
    ``str``."""
    return _ROW % tuple(values)


def _stretch_line(replica: int, running: int, batch: int) -> str:
    """The line of a decode-stretch row as a %-template of its per-step values (step,
    start, duration, formatted KV usage, free, cached and cached-free blocks): "%.9g"
    is :func:`fmt`'s format, applied in C. The constants are those of
    :meth:`DecodeRows.row`."""
    values: dict[str, object] = {
        "replica": replica,
        "step": "%d",
        "start_s": "%.9g",
        "duration_s": "%.9g",
        "num_running": running,
        "num_waiting": 0,
        "num_prefill_tokens": 0,
        "num_decode_tokens": batch,
        "num_preempted": 0,
        "kv_usage": "%s",
        "num_free_blocks": "%d",
        "num_cached_blocks": "%d",
        "prefix_queries": 0,
        "prefix_hits": 0,
        "num_cached_free_blocks": "%d",
    }
    return _LINE % tuple(values[c] for c in STEP_COLUMNS)


class StepChunk:
    """Step items plus the per-step values of their decode stretches (see above)."""

    __slots__ = ("cached", "cached_free", "durations", "free", "items")

    def __init__(self) -> None:
        self.items: list[tuple[Any, ...]] = []
        self.durations = array("d")
        self.free = array("q")
        self.cached = array("q")
        self.cached_free = array("q")


def chunk_items(chunk: StepChunk) -> Iterator[tuple[Any, ...] | DecodeRows]:
    """The items of ``chunk`` in row order: a row's values as they are, a decode
    stretch as :class:`sim.records.step_row.DecodeRows`."""
    durations = chunk.durations.tolist()
    free, cached, cfree = chunk.free.tolist(), chunk.cached.tolist(), chunk.cached_free.tolist()
    at = 0  # where the next decode stretch's values start
    for item in chunk.items:
        if item[0] != DECODE:
            yield item
            continue
        rows = DecodeRows.from_head(item, at, durations, free, cached, cfree)
        yield rows
        at += len(rows.durations)


class StepRowWriter:
    """Writes chunks of step items to ``steps.csv`` (header first, flushed at once, so
    the open file holds no buffered text)."""

    def __init__(self, path: Path, columns: tuple[str, ...]) -> None:
        self._file: IO[str] = path.open("w", newline="")
        self._file.write(",".join(columns) + "\n")
        self._file.flush()
        self._usage_text: dict[int, str] = {}  # free-block count -> formatted KV usage
        self._usage_usable = -1  # the usable block count the texts are for
        self._lines: dict[tuple[int, int, int], str] = {}  # _stretch_line's, by its args

    def write(self, chunk: StepChunk) -> None:
        """Append the rows of ``chunk``."""
        texts = [
            self._decode_text(item) if isinstance(item, DecodeRows) else row_text(item)
            for item in chunk_items(chunk)
        ]
        self._file.write("".join(texts))

    def close(self) -> None:
        self._file.close()

    def _line(self, key: tuple[int, int, int]) -> str:
        """:func:`_stretch_line` of ``key``, made once."""
        lines = self._lines
        if len(lines) >= 4096:
            lines.clear()
        line = lines[key] = _stretch_line(*key)
        return line

    def _decode_text(self, rows: DecodeRows) -> str:
        usable = rows.num_usable_blocks
        free = rows.num_free_blocks
        # KV usage takes few distinct values: its text is kept per free-block count.
        memo = self._usage_text
        if usable != self._usage_usable:
            memo.clear()
            self._usage_usable = usable
        usage_text = []
        for f in free:
            text = memo.get(f)
            if text is None:
                text = memo[f] = fmt(BlockPool.usage_at(f, usable))
            usage_text.append(text)
        # The last row's num_running is last_running (requests may finish in the last
        # step).
        replica, batch, lines = rows.replica, rows.batch, self._lines
        key = (replica, rows.last_running, batch)
        last = lines.get(key) or self._line(key)
        k = len(free)
        if k == 1:  # several replicas write their stretches a step at a time
            return last % (
                rows.step0,
                rows.start0_s,
                rows.durations[0],
                usage_text[0],
                free[0],
                rows.num_cached_blocks[0],
                rows.num_cached_free_blocks[0],
            )
        # One %-format over all rows.
        key = (replica, batch, batch)
        row = lines.get(key) or self._line(key)
        values = zip(
            range(rows.step0, rows.step0 + k),
            rows.starts(),
            rows.durations,
            usage_text,
            free,
            rows.num_cached_blocks,
            rows.num_cached_free_blocks,
        )
        return (row * (k - 1) + last) % tuple(chain.from_iterable(values))
