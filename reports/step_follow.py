"""A run's ``steps.csv`` checked while the run still writes it, so that the report
after the run does not parse it again (about 0.17 s of a 20,000-request run's
386,000 rows, after the simulation and before the timeline can be drawn).

A :class:`StepFollower` is what the render worker (:mod:`reports.render_worker`) does
while it waits for the run: every :meth:`~StepFollower.poll` reads what the file has
gained, and parses and checks its complete lines (:class:`reports.step_stream.StepCheck`)
once a block of :data:`BLOCK_BYTES` has gathered. :meth:`~StepFollower.rows` reads the
rest once the run has written the file and gives what
:func:`reports.step_stream.read_step_rows` would give for it. It gives nothing (the
report then reads the file as usual) when anything is unusual: the file is not the one
followed or has changed size since, the parser left a line out (one with too many
fields), or a block could not be parsed. The file is only read, never changed.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import BinaryIO

import pandas as pd

from reports.run_records import STEP_OPTIONAL_COLUMNS, STEP_PLOT_COLUMNS
from reports.step_stream import StepCheck, StepRows

BLOCK_BYTES = 1 << 21
"""Complete lines gathered before they are parsed (about 26,000 rows)."""


class StepFollower:
    """Follows the steps file ``path`` (CSV, one row per step) as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.failed = False
        self._file: BinaryIO | None = None
        self._header: bytes | None = None  # the header line, with its newline
        self._check: StepCheck | None = None
        self._tail = b""  # bytes read after the last complete line
        self._block: list[bytes | memoryview] = []  # complete lines not yet parsed
        self._block_bytes = 0
        self._block_lines = 0
        self._read = 0  # bytes read from the file
        self._newlines = 0
        self._last = b"\n"  # the last byte read

    def poll(self, final: bool = False) -> None:
        """Read what the file has gained and parse full blocks of it; ``final``: the
        file is complete, parse everything. Any error stops the following."""
        if self.failed:
            return
        try:
            self._poll(final)
        except Exception:  # the report reads the file itself
            self._stop()

    def rows(self, path: Path, expected: int | None, what: str) -> StepRows | None:
        """Once the run has written the file: :func:`reports.step_stream.read_step_rows`'s
        answer for ``path`` (``expected`` rows, called ``what``), or None when it is not
        the file followed or following it failed."""
        self.poll(final=True)
        file, check = self._file, self._check
        try:
            if self.failed or file is None or check is None:
                return None
            mine, theirs = os.fstat(file.fileno()), os.stat(path)
        except OSError:
            return None
        finally:
            self._stop()
        if (mine.st_dev, mine.st_ino, self._read) != (theirs.st_dev, theirs.st_ino, theirs.st_size):
            return None
        return check.finish(self._newlines, self._last == b"\n", expected, what)

    def _stop(self) -> None:
        self.failed = True
        if self._file is not None:
            self._file.close()

    def _poll(self, final: bool) -> None:
        if self._file is None:
            if not self.path.is_file():
                return
            self._file = self.path.open("rb")
        data = self._file.read()
        if data:
            self._read += len(data)
            lines = data.count(b"\n")
            self._newlines += lines
            self._last = data[-1:]
            if lines:
                end = data.rfind(b"\n") + 1
                view = memoryview(data)
                if self._header is None:
                    first = data.index(b"\n") + 1
                    self._start(self._tail + data[:first])
                    self._add(view[first:end], lines - 1)  # but the header's
                else:
                    self._add(self._tail, 0)
                    self._add(view[:end], lines)
                self._tail = data[end:]
            else:
                self._tail += data
        if final:
            if self._tail:  # a last line without its newline
                self._add(self._tail, 1)
                self._tail = b""
            self._parse()
        elif self._block_bytes >= BLOCK_BYTES:
            self._parse()

    def _start(self, header: bytes) -> None:
        """The header line read (with its newline): the columns to check."""
        self._header = header
        columns = list(pd.read_csv(io.BytesIO(header), nrows=0).columns)
        self._check = StepCheck(self.path, columns, STEP_PLOT_COLUMNS, STEP_OPTIONAL_COLUMNS)

    def _add(self, piece: bytes | memoryview, lines: int) -> None:
        """Bytes of the next rows (``lines`` of them) to parse."""
        if len(piece):
            self._block.append(piece)
            self._block_bytes += len(piece)
            self._block_lines += lines

    def _parse(self) -> None:
        """Parse and check the gathered rows; a line the parser left out (too many
        fields) stops the following."""
        if not self._block or self._check is None or self._header is None:
            return
        block = b"".join([self._header, *self._block])
        lines = self._block_lines
        self._block, self._block_bytes, self._block_lines = [], 0, 0
        chunk = pd.read_csv(io.BytesIO(block), on_bad_lines="skip", skip_blank_lines=False)
        if len(chunk) != lines:
            raise ValueError("lines left out")
        self._check.add(chunk)
