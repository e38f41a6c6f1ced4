"""CSV traces: Azure LLM inference traces and BurstGPT.

Azure (github.com/Azure/AzurePublicDataset, 2023 and 2024 LLM inference traces):
columns ``TIMESTAMP`` (a date-time such as ``2023-11-16 18:15:46.6805900``, any time
zone suffix honoured), ``ContextTokens`` and ``GeneratedTokens``. Arrival = seconds
since the first row's timestamp.

BurstGPT (github.com/HPMLL/BurstGPT): columns ``Timestamp`` (seconds), ``Model``,
``Request tokens``, ``Response tokens``, ``Total tokens``, ``Log Type``; only the
timestamp and the two token counts are read. Arrival = Timestamp - first Timestamp.

In both, rows with 0 prompt or 0 output tokens are skipped (BurstGPT logs failed
requests with 0 response tokens; a request needs at least one of each) and counted in
``TraceTable.skipped_rows``. Negative counts, unparsable values and arrivals that go
back in time are errors naming the line.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from workloads.errors import WorkloadError
from workloads.traces.jsonl import text_lines
from workloads.traces.table import TraceTable, check_arrivals, require_nonempty

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")

_DATETIME = re.compile(
    r"^(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(\.\d+)?\s*(Z|[+-]\d{2}:?\d{2})?$"
)


def parse_datetime(text: str) -> tuple[int, float]:
    """Whole seconds since the epoch and the fraction of a second (naive = UTC).

    Python 3.10's ``fromisoformat`` rejects 7 fractional digits, as Azure writes them.
    """
    match = _DATETIME.match(text.strip())
    if match is None:
        raise ValueError(f"not a date-time: {text!r}")
    whole, fraction, zone = match.groups()
    stamp = whole.replace("T", " ")
    if zone and zone != "Z":
        stamp += zone if ":" in zone else zone[:3] + ":" + zone[3:]
    moment = datetime.fromisoformat(stamp)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp()), float("0" + fraction) if fraction else 0.0


def _csv_rows(path: Path, file: str) -> Iterator[tuple[int, list[str]]]:
    """``(line number, cells)`` of each CSV record; a file that is not UTF-8 text or
    not CSV (binary garbage, NUL bytes) is a ``WorkloadError`` naming the line."""
    lines = (text for _, text in text_lines(path, file))
    reader = csv.reader(lines)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise WorkloadError(file, f"line {reader.line_num}", f"not CSV ({exc})") from None
        yield reader.line_num, row


def read_header(path: Path, file: str) -> list[str]:
    """The stripped column names of a CSV file."""
    header = next(_csv_rows(path, file), (0, []))[1]
    return [name.strip() for name in header]


def _rows(path: Path, file: str, columns: tuple[str, ...]) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line number, [values of columns])``; a missing column is an error."""
    records = _csv_rows(path, file)
    header = [name.strip() for name in next(records, (0, []))[1]]
    missing = [c for c in columns if c not in header]
    if missing:
        raise WorkloadError(
            file,
            "header",
            f"missing column {', '.join(repr(c) for c in missing)} "
            f"(need {', '.join(columns)}; found {', '.join(header) or 'nothing'})",
        )
    index = [header.index(c) for c in columns]
    for line_num, row in records:
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) < len(header):
            raise WorkloadError(
                file, f"line {line_num}", f"{len(row)} values, header has {len(header)}"
            )
        yield line_num, [row[i].strip() for i in index]


def _count(text: str, file: str, where: str) -> int:
    try:
        value = int(float(text))
    except (ValueError, OverflowError):
        raise WorkloadError(file, where, f"not a token count: {text!r}") from None
    if value < 0:
        raise WorkloadError(file, where, f"must be >= 0 (got {value})")
    return value


def _read(
    path: Path, file: str, fmt: str, columns: tuple[str, ...], stamp: Callable[[str], float]
) -> TraceTable:
    arrivals: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    lines: list[str] = []
    numbers: list[int] = []
    skipped = 0
    for number, (when, prompt, output) in _rows(path, file, columns):
        try:
            seconds = stamp(when)
        except ValueError as exc:
            raise WorkloadError(file, f"line {number}: {columns[0]}", str(exc)) from None
        p = _count(prompt, file, f"line {number}: {columns[1]}")
        o = _count(output, file, f"line {number}: {columns[2]}")
        if p == 0 or o == 0:
            skipped += 1
            continue
        arrivals.append(seconds)
        prompts.append(p)
        outputs.append(o)
        lines.append(f"line {number}")
        numbers.append(number)
    require_nonempty(file, len(arrivals))
    check_arrivals(file, arrivals, lines, columns[0])
    return TraceTable(
        format=fmt,
        arrival_s=np.asarray(arrivals, dtype=np.float64) - arrivals[0],
        prompt_tokens=np.asarray(prompts, dtype=np.int64),
        output_tokens=np.asarray(outputs, dtype=np.int64),
        skipped_rows=skipped,
        line_numbers=numbers,
    )


def read_azure(path: Path, file: str) -> TraceTable:
    """Read an Azure LLM inference CSV trace (see the module docstring)."""
    first: list[tuple[int, float]] = []

    def stamp(text: str) -> float:
        whole, fraction = parse_datetime(text)
        if not first:
            first.append((whole, fraction))
        # Subtract whole seconds as integers to keep sub-microsecond precision.
        return (whole - first[0][0]) + fraction

    return _read(path, file, "azure", AZURE_COLUMNS, stamp)


def read_burstgpt(path: Path, file: str) -> TraceTable:
    """Read a BurstGPT CSV trace (see the module docstring)."""

    def stamp(text: str) -> float:
        value = float(text)
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"not a time: {text!r}")
        return value

    return _read(path, file, "burstgpt", BURSTGPT_COLUMNS, stamp)
