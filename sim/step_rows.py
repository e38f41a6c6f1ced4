"""``steps.csv`` text from raw step values: the half of :class:`sim.records.StepRecorder`
that may run in a helper process (:mod:`sim.offload`).

The recorder hands over :class:`StepChunk` s: items in row order, each either

- a *step*: the 15 raw values of one row (``STEP_COLUMNS`` order; floats unformatted);
- a *decode stretch* (tagged ``DECODE``): ``k`` consecutive decode-only steps of one
  batch, ``(DECODE, replica, step0, start0, k, batch, last_running, usable_blocks)``,
  whose per-step durations and block counts are the next ``k`` values of the chunk's
  arrays (compact: they pickle as bytes); step ``j + 1`` starts at step ``j``'s start
  plus its duration (summed here as the stretch timer sums them); see
  :meth:`StepRecorder.add_decode_steps`.

:class:`StepRowWriter` turns each chunk into text and writes it; where that runs does
not change a byte.
"""

from __future__ import annotations

from array import array
from itertools import chain
from pathlib import Path
from typing import IO, Any

DECODE = "d"
"""The tag of a decode-stretch item."""


def fmt(x: float) -> str:
    """Floats with 9 significant digits: stable text, byte-identical across runs."""
    return format(x, ".9g")


class StepChunk:
    """Step items plus the per-step values of their decode stretches (see above)."""

    __slots__ = ("cached", "cached_free", "durations", "free", "items")

    def __init__(self) -> None:
        self.items: list[tuple[Any, ...]] = []
        self.durations = array("d")
        self.free = array("q")
        self.cached = array("q")
        self.cached_free = array("q")


_STEP_ROW = ",".join(["%s"] * 15) + "\n"  # str() of each value, as csv.writer writes


class StepRowWriter:
    """Writes chunks of step items to ``steps.csv`` (header first, flushed at once, so
    the open file holds no buffered text)."""

    def __init__(self, path: Path, columns: tuple[str, ...]) -> None:
        self._file: IO[str] = path.open("w", newline="")
        self._file.write(",".join(columns) + "\n")
        self._file.flush()
        self._usage_text: dict[int, str] = {}  # free-block count -> formatted KV usage
        self._usage_usable = -1  # the usable block count the texts are for

    def write(self, chunk: StepChunk) -> None:
        """Append the rows of ``chunk``."""
        durations = chunk.durations.tolist()
        free, cached, cfree = chunk.free.tolist(), chunk.cached.tolist(), chunk.cached_free.tolist()
        texts = []
        at = 0  # where the next decode stretch's values start
        for item in chunk.items:
            if item[0] != DECODE:
                row = list(item)
                row[2] = fmt(row[2])
                row[3] = fmt(row[3])
                row[9] = fmt(row[9])
                texts.append(_STEP_ROW % tuple(row))
                continue
            end = at + item[4]
            values = durations[at:end], free[at:end], cached[at:end], cfree[at:end]
            texts.append(self._decode_text(item, *values))
            at = end
        self._file.write("".join(texts))

    def close(self) -> None:
        self._file.close()

    def _decode_text(
        self,
        item: tuple[Any, ...],
        durations: list[float],
        free: list[int],
        cached: list[int],
        cfree: list[int],
    ) -> str:
        _, replica, step0, t, k, batch, last_running, usable = item
        starts = []
        for d in durations:
            starts.append(t)
            t = t + d
        # KV usage takes few distinct values: its text is kept per free-block count.
        memo = self._usage_text
        if usable != self._usage_usable:
            memo.clear()
            self._usage_usable = usable
        usage_text = []
        for f in free:
            text = memo.get(f)
            if text is None:
                text = memo[f] = fmt(1.0 - f / usable if usable else 0.0)
            usage_text.append(text)
        # One %-format over all rows: "%.9g" is fmt's format, applied in C. The last
        # row's num_running is last_running (requests may finish in the last step).
        row = f"{replica},%d,%.9g,%.9g,{batch},0,0,{batch},0,%s,%d,%d,0,0,%d\n"
        last = f"{replica},%d,%.9g,%.9g,{last_running},0,0,{batch},0,%s,%d,%d,0,0,%d\n"
        return (row * (k - 1) + last) % tuple(
            chain.from_iterable(
                zip(range(step0, step0 + k), starts, durations, usage_text, free, cached, cfree)
            )
        )
