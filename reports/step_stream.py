"""A run's ``steps.csv`` checked and binned in chunks, a long one never held whole in
memory.

A long run writes a row per engine step (about 15 per chat request: 15 million rows,
1.2 GB, for a million requests); read whole into a DataFrame they took several GiB.
:func:`read_step_rows` reads the file once in chunks of :data:`CHUNK_ROWS` rows and
keeps only what the checks and the binning need (counts, the first bad row, the end
of the last row, the rows per replica); :meth:`StepRows.binned` reads it again, chunk
by chunk, into :class:`reports.step_bins.StepBinner` (a file of at most
:data:`KEEP_ROWS` rows keeps its checked chunks instead: about 0.2 s less for a
20,000-request run's 386,000 rows). Notes, kept rows and the binned
series are those of reading the whole file at once (``reports.run_records._read_one``;
see :mod:`reports.run_records` for the checks), bit for bit on an intact file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from reports.run_records import RunRecordsError, as_numbers, count_lines
from reports.step_bins import BinnedSteps, StepBinner, bin_count, bin_end

CHUNK_ROWS = 1 << 17
"""Rows parsed at once (~15 MiB of a full ``steps.csv``)."""
KEEP_ROWS = 1 << 20
"""Files of at most this many rows keep their checked rows (numbers only, ~70 MiB at
most) for :meth:`StepRows.binned`, which then does not read the file again."""


def _chunks(path: Path) -> Iterator[pd.DataFrame]:
    """The file's rows in chunks, as ``pd.read_csv`` parses them (bad lines skipped);
    RunRecordsError when it cannot be parsed."""
    try:
        with pd.read_csv(
            path, on_bad_lines="skip", skip_blank_lines=False, chunksize=CHUNK_ROWS
        ) as reader:
            for chunk in reader:
                if len(chunk):
                    yield chunk
    except pd.errors.EmptyDataError:
        raise RunRecordsError(f"{path}: empty (no header line)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise RunRecordsError(f"{path}: not readable as CSV ({e})") from None


def _header(path: Path, columns: tuple[str, ...]) -> list[str]:
    """The header's column names; RunRecordsError when a column of ``columns`` is missing
    or the file has no header."""
    try:
        header = list(pd.read_csv(path, nrows=0).columns)
    except pd.errors.EmptyDataError:
        raise RunRecordsError(f"{path}: empty (no header line)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise RunRecordsError(f"{path}: not readable as CSV ({e})") from None
    check_header(path, header, columns)
    return header


def check_header(path: Path, header: list[str], columns: tuple[str, ...]) -> None:
    """RunRecordsError when a column of ``columns`` is not in ``header`` (``path``'s)."""
    missing = [c for c in columns if c not in header]
    if missing:
        raise RunRecordsError(
            f"{path}: header: missing column(s) {', '.join(missing)}; needed: {', '.join(columns)}"
        )


def _checked(chunk: pd.DataFrame, numeric: list[str]) -> tuple[pd.DataFrame, np.ndarray]:
    """``numeric`` columns of ``chunk`` as numbers (NaN where not) and which rows have a
    value that is not one."""
    parsed = as_numbers(chunk[numeric])
    return parsed, parsed.isna().any(axis=1).to_numpy()


@dataclass
class StepRows:
    """The checked rows of a steps file, read again chunk by chunk when binned.

    ``numeric``: the plotted columns the header has (every kept row holds numbers in
    them); ``rows_read``: rows the parser returned (before the cut last line is left
    out); ``drop_last``: the last of them is cut off mid-row (left out); ``num_rows``:
    rows kept; ``last_s``: the latest end of a kept row (``start_s + duration_s``, s);
    ``rows_per_replica``: kept rows by replica id; ``notes``: one line per problem."""

    path: Path
    numeric: list[str]
    has_duration: bool
    rows_read: int = 0
    drop_last: bool = False
    num_rows: int = 0
    last_s: float = -np.inf
    rows_per_replica: dict[float, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    kept: list[pd.DataFrame] | None = field(default_factory=list)
    """The checked chunks, as :meth:`chunks` yields them, while the file has at most
    :data:`KEEP_ROWS` rows; None when it has more (then read again)."""

    @property
    def empty(self) -> bool:
        """No row kept."""
        return self.num_rows == 0

    def chunks(self) -> Iterator[pd.DataFrame]:
        """The kept rows (``numeric`` columns, numbers) in file order, in chunks."""
        if self.kept is not None:
            yield from self.kept
            return
        offset = 0
        for chunk in _chunks(self.path):
            offset += len(chunk)
            if self.drop_last and offset == self.rows_read:
                chunk = chunk.iloc[:-1]
            parsed, bad = _checked(chunk, self.numeric)
            yield parsed[~bad] if bad.any() else parsed

    def _tally(self, good: pd.DataFrame) -> None:
        """Count kept rows ``good`` (the next in file order) into the totals."""
        if good.empty:
            return
        self.num_rows += len(good)
        end = good["start_s"].to_numpy(dtype=np.float64)
        if self.has_duration:
            end = end + good["duration_s"].to_numpy(dtype=np.float64)
        self.last_s = max(self.last_s, float(np.max(end)))
        for replica, count in good["replica"].value_counts(sort=False).items():
            self.rows_per_replica[replica] = self.rows_per_replica.get(replica, 0) + int(count)

    def binned(self, usable_blocks: int, end_s: float | None = None) -> BinnedSteps | None:
        """:func:`reports.step_bins.bin_steps` of the kept rows (None without rows):
        ``usable_blocks`` KV blocks per replica, the timeline to ``end_s`` (s) or the
        end of the last row."""
        if self.empty:
            return None
        n = bin_count(max(self.rows_per_replica.values()))
        binner = StepBinner(bin_end(self.last_s, end_s), n, usable_blocks, self.has_duration)
        for chunk in self.chunks():
            binner.add(chunk)
        return binner.result()


def read_step_rows(
    path: Path,
    columns: tuple[str, ...],
    optional: tuple[str, ...],
    expected: int | None,
    what: str,
) -> StepRows:
    """Check a steps CSV file in chunks: the rows and notes of
    :mod:`reports.run_records`' checks (``columns`` needed in the
    header, ``optional`` checked as numbers when there, the row count compared with
    ``expected`` unless None, ``what`` the rows are called in notes) without holding
    the rows. RunRecordsError when the file cannot be read at all."""
    if not path.is_file():
        raise RunRecordsError(f"{path}: missing (the run's {what} records)")
    newlines, ends_in_newline = count_lines(path)
    check = StepCheck(path, _header(path, columns), columns, optional)
    for chunk in _chunks(path):
        check.add(chunk)
    return check.finish(newlines, ends_in_newline, expected, what)


class StepCheck:
    """:func:`read_step_rows`' checks fed the file's parsed rows chunk by chunk, in file
    order (chunks cut anywhere between rows give the same result): ``header`` is the
    file's column names (checked for ``columns``), then :meth:`add` each chunk as
    ``pd.read_csv`` parses it, then :meth:`finish`."""

    def __init__(
        self, path: Path, header: list[str], columns: tuple[str, ...], optional: tuple[str, ...]
    ) -> None:
        check_header(path, header, columns)
        numeric = [c for c in (*columns, *optional) if c in header]
        self.rows = StepRows(path, numeric, "duration_s" in header)
        self._bad_rows = 0
        self._first_bad: tuple[int, str] | None = None  # (row index after the cut, values)
        self._pending: tuple[int, pd.DataFrame] | None = None  # held until the last is known

    def add(self, chunk: pd.DataFrame) -> None:
        """The next parsed chunk of the file (empty ones are ignored)."""
        if not len(chunk):
            return
        rows = self.rows
        if self._pending is not None:
            self._check(*self._pending)
        self._pending = (rows.rows_read, chunk)
        rows.rows_read += len(chunk)
        if rows.rows_read > KEEP_ROWS:
            rows.kept = None

    def _check(self, offset: int, chunk: pd.DataFrame) -> None:
        rows = self.rows
        numeric = rows.numeric
        parsed, bad = _checked(chunk, numeric)
        if bad.any():
            self._bad_rows += int(bad.sum())
            if self._first_bad is None:
                i = int(bad.argmax())
                shown = ", ".join(
                    f"{c} {'' if pd.isna(chunk[c].iloc[i]) else str(chunk[c].iloc[i])!r}"
                    for c in numeric
                    if pd.isna(parsed[c].iloc[i])
                )
                self._first_bad = (offset + i, shown)
            parsed = parsed[~bad]
        rows._tally(parsed)
        if rows.kept is not None:
            rows.kept.append(parsed)

    def finish(
        self, newlines: int, ends_in_newline: bool, expected: int | None, what: str
    ) -> StepRows:
        """The rows and notes, given the file's newline count and whether it ends in
        one (:func:`reports.run_records.count_lines`)."""
        rows = self.rows
        name = rows.path.name
        cut = 0 if ends_in_newline else 1  # a last line without its newline
        skipped = newlines - 1 + cut - rows.rows_read  # lines pandas left out (too many fields)
        # All rows there when the count matches: only the final newline is gone.
        rows.drop_last = bool(cut and rows.rows_read and rows.rows_read != expected)
        if self._pending is not None:
            offset, chunk = self._pending
            self._pending = None
            self._check(offset, chunk.iloc[:-1] if rows.drop_last else chunk)
        if rows.drop_last:
            rows.notes.append(f"{name}: the last line is cut off mid-row (left out)")
        if skipped > 0:
            rows.notes.append(
                f"{name}: {skipped:,} malformed line(s) with too many fields (left out)"
            )
        if self._first_bad is not None:
            first, shown = self._first_bad
            where = f"line {first + 2}" if skipped <= 0 else f"data row {first + 1}"
            rows.notes.append(
                f"{name}: {self._bad_rows:,} row(s) with values that are not numbers (left out; "
                f"first: {where}: {shown})"
            )
        if expected is not None and rows.num_rows != expected:
            rows.notes.append(
                f"{name} holds {rows.num_rows:,} of {expected:,} {what}: the plots are partial"
            )
        return rows
