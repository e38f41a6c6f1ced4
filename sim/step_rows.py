"""``steps.csv`` text from raw step values: the half of :class:`sim.records.StepRecorder`
that may run in a helper process (:mod:`sim.offload`).

The recorder hands over chunks (lists) of items, in row order:

- a *step*: the 15 raw values of one row (``STEP_COLUMNS`` order; floats unformatted);
- a *decode stretch* (tagged ``DECODE``): consecutive decode-only steps of one batch,
  ``(DECODE, replica, step0, start0, durations, batch, last_running, usable_blocks,
  num_free_blocks, num_cached_blocks, num_cached_free)``, sequences of one value per
  step; step ``j + 1`` starts at step ``j``'s start plus its duration (summed here as
  the stretch timer sums them); see :meth:`StepRecorder.add_decode_steps`.

:class:`StepRowWriter` turns each chunk into text and writes it; where that runs does
not change a byte.
"""

from __future__ import annotations

from itertools import chain
from pathlib import Path
from typing import IO, Any

DECODE = "d"
"""The tag of a decode-stretch item."""


def fmt(x: float) -> str:
    """Floats with 9 significant digits: stable text, byte-identical across runs."""
    return format(x, ".9g")


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

    def write(self, chunk: list[tuple[Any, ...]]) -> None:
        """Append the rows of ``chunk``."""
        self._file.write("".join([self._text(item) for item in chunk]))

    def close(self) -> None:
        self._file.close()

    def _text(self, item: tuple[Any, ...]) -> str:
        if item[0] != DECODE:
            row = list(item)
            row[2] = fmt(row[2])
            row[3] = fmt(row[3])
            row[9] = fmt(row[9])
            return _STEP_ROW % tuple(row)
        _, replica, step0, t, durations, batch, last_running, usable = item[:8]
        free, cached, cfree = item[8:]
        k = len(durations)
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
