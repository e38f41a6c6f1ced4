"""Per-request records, streamed to ``requests.csv`` (and ``aborted.csv``) as the
simulation runs.

The columns are the contract of INTERFACES.md (:data:`REQUEST_COLUMNS`,
:data:`ABORTED_COLUMNS`). Rows go to disk in chunks so memory does not grow with the
run's length; the few columns the summary needs are kept as compact ``array`` buffers.
"""

from __future__ import annotations

import csv
from array import array
from pathlib import Path
from typing import IO

from sim.offload import ChunkWriter
from sim.records.step_rows import fmt

REQUEST_COLUMNS = (
    "request_id",
    "replica",
    "arrival_s",
    "first_token_s",
    "finish_s",
    "prompt_tokens",
    "output_tokens",
    "cached_tokens",
    "num_preemptions",
)
ABORTED_COLUMNS = (*REQUEST_COLUMNS[:4], "abort_s", *REQUEST_COLUMNS[5:])
"""``aborted.csv``: requests aborted at their client's timeout (``abort_s``: when; a
``first_token_s`` of -1: before any token), written only by runs that abort some."""
_NAN = float("nan")
_FLUSH_ROWS = 4096


class _CsvRows:
    """Writes chunks of request rows to a CSV file (header first, flushed at once, so
    the open file holds no buffered text): the three times (columns 2-4, seconds) as
    :func:`sim.records.step_rows.fmt` writes them, the rest as ``csv`` does."""

    def __init__(self, path: Path, columns: tuple[str, ...]) -> None:
        self._file: IO[str] = path.open("w", newline="")
        self._writer = csv.writer(self._file, lineterminator="\n")
        self._writer.writerow(columns)
        self._file.flush()

    def write(self, rows: list[tuple]) -> None:
        self._writer.writerows(
            [(r[0], r[1], fmt(r[2]), fmt(r[3]), fmt(r[4]), *r[5:]) for r in rows]
        )

    def close(self) -> None:
        self._file.close()


class _CsvSink:
    """Request rows in chunks to a :class:`_CsvRows`, formatted and written by a helper
    process when ``helper`` (:class:`sim.offload.ChunkWriter`), else here."""

    def __init__(self, path: Path, columns: tuple[str, ...], helper: bool = False) -> None:
        self._out = ChunkWriter(_CsvRows(path, columns), helper, f"{path.name} writer")
        self._rows: list[tuple] = []

    def add(self, row: tuple) -> None:
        self._rows.append(row)
        if len(self._rows) >= _FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        if self._rows:
            self._out.write(self._rows)
            self._rows = []

    def finish(self) -> None:
        """Hand over the remaining rows and end the file; :meth:`close` waits for it."""
        self.flush()
        self._out.finish()

    def close(self) -> None:
        """Write the remaining rows and close the file (waits for the helper)."""
        try:
            self.flush()
        finally:
            self._out.close()


class RequestRecorder:
    """Writes ``requests.csv`` as requests finish; keeps, per finished request in
    finish order, TTFT and TPOT (NaN with one output token), arrival and finish times
    (seconds), prompt and output tokens and preemptions, and per-replica counts."""

    def __init__(self, path: Path, helper: bool = False) -> None:
        """``helper``: format and write ``requests.csv`` in a helper process
        (:mod:`sim.offload`); ``aborted.csv``, opened at a first abort, is written here."""
        self._sink = _CsvSink(path, REQUEST_COLUMNS, helper)
        self._aborted_path = path.with_name("aborted.csv")
        self._aborted: _CsvSink | None = None  # opened at the first abort
        self.num_aborted = 0
        self.num_aborted_before_first_token = 0
        self.ttft_s = array("d")
        self.tpot_s = array("d")  # NaN for a request with one output token
        self.arrival_s = array("d")
        self.finish_s = array("d")
        self.output_len = array("q")
        self.prompt_len = array("q")
        self.preempted = array("q")
        self.per_replica: dict[int, list[int]] = {}  # [finished, preemptions, output tokens]
        self.num_finished = 0
        self.num_preemptions = 0
        self.output_tokens = 0

    def add(
        self,
        request_id: str,
        replica: int,
        arrival_s: float,
        first_token_s: float,
        finish_s: float,
        prompt_tokens: int,
        output_tokens: int,
        cached_tokens: int,
        num_preemptions: int,
    ) -> None:
        self._sink.add(
            (
                request_id,
                replica,
                arrival_s,
                first_token_s,
                finish_s,
                prompt_tokens,
                output_tokens,
                cached_tokens,
                num_preemptions,
            )
        )
        self.ttft_s.append(first_token_s - arrival_s)
        self.arrival_s.append(arrival_s)
        self.finish_s.append(finish_s)
        counts = self.per_replica.get(replica)
        if counts is None:
            counts = self.per_replica[replica] = [0, 0, 0]
        counts[0] += 1
        counts[1] += num_preemptions
        counts[2] += output_tokens
        self.tpot_s.append(
            (finish_s - first_token_s) / (output_tokens - 1) if output_tokens > 1 else _NAN
        )
        self.output_len.append(output_tokens)
        self.prompt_len.append(prompt_tokens)
        self.preempted.append(num_preemptions)
        self.num_finished += 1
        self.num_preemptions += num_preemptions
        self.output_tokens += output_tokens

    def add_aborted(
        self,
        request_id: str,
        replica: int,
        arrival_s: float,
        first_token_s: float,
        abort_s: float,
        prompt_tokens: int,
        output_tokens: int,
        cached_tokens: int,
        num_preemptions: int,
    ) -> None:
        """Record a request aborted at ``abort_s`` (seconds) in ``aborted.csv``; it is
        not a finished request (no latency sample)."""
        if self._aborted is None:
            self._aborted = _CsvSink(self._aborted_path, ABORTED_COLUMNS)
        self._aborted.add(
            (
                request_id,
                replica,
                arrival_s,
                first_token_s,
                abort_s,
                prompt_tokens,
                output_tokens,
                cached_tokens,
                num_preemptions,
            )
        )
        self.num_aborted += 1
        if first_token_s < 0:
            self.num_aborted_before_first_token += 1

    def finish(self) -> None:
        """No more requests: the files get their last rows and end, written on by the
        helper without this waiting for it (:meth:`close` waits)."""
        self._sink.finish()
        if self._aborted is not None:
            self._aborted.finish()

    def close(self) -> None:
        """Write the remaining rows and close the files (waits for the helper)."""
        try:
            self._sink.close()
        finally:
            if self._aborted is not None:
                self._aborted.close()
