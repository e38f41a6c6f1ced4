"""Read a run's ``steps.csv`` and ``requests.csv`` for the plots, checked against
``summary.json``.

A finished run writes one ``steps.csv`` row per engine step of every replica (the sum
is ``summary.json``'s ``num_steps``) and one ``requests.csv`` row per finished request
(``num_finished``), each row ending in a newline. A file cut short (a disk that filled
up, a copy that stopped, an edit) is detected here, not plotted silently:

- a last line without its newline is cut mid-row: it is left out (unless the rows
  then match the summary's count: only the final newline is missing);
- rows whose plotted columns do not parse as numbers (or have too many fields) are
  left out;
- fewer (or more) rows than the summary counts: the plots are partial.

Each finding is one line for the report and the terminal. A file that cannot be read
at all (missing, empty, no header, a plotted column missing) raises
``RunRecordsError`` naming the file and what is wrong.

A run made with ``--steps thin`` or ``--steps none`` (``summary.json``'s
``steps_file``, :mod:`sim.records.step_thin`) is checked against what it wrote: the thinned
row count, or no ``steps.csv`` at all (an empty steps table, no note: the run asked
for it); with ``--steps-format parquet`` the rows are read from ``steps.parquet``.
Runs without ``steps_file`` (older ones) wrote a row per step to ``steps.csv``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from reports.step_follow import StepFollower
    from reports.step_stream import StepRows

STEP_PLOT_COLUMNS = (
    "replica",
    "start_s",
    "num_running",
    "num_waiting",
    "num_preempted",
    "num_free_blocks",
)
"""The ``steps.csv`` columns the run plots read."""
STEP_OPTIONAL_COLUMNS = ("duration_s", "kv_usage", "num_cached_free_blocks")
"""Columns the plots use when present (checked as numbers like the others)."""
REQUEST_PLOT_COLUMNS = ("arrival_s", "first_token_s", "finish_s", "output_tokens")
"""The ``requests.csv`` columns the latency plot reads."""


class RunRecordsError(ValueError):
    """A run's CSV file cannot be read at all; ``str`` is ``<file>: <problem>``."""


def as_numbers(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame``'s columns as numbers, NaN where a value is not one (``pd.to_numeric``
    with ``errors="coerce"``); columns the parser read as numbers are kept as they are
    (what to_numeric would give them), which is every column of an intact file."""
    if all(dtype.kind in "iuf" for dtype in frame.dtypes):
        return frame
    return frame.apply(pd.to_numeric, errors="coerce")


def steps_file_name(summary: dict[str, Any]) -> str:
    """The run's steps file: ``steps_file.file`` (``steps.csv`` or ``steps.parquet``),
    ``steps.csv`` for runs that do not say."""
    info = summary.get("steps_file")
    name = info.get("file") if isinstance(info, dict) else None
    return name if name in ("steps.csv", "steps.parquet") else "steps.csv"


def _read_parquet(
    path: Path, columns: tuple[str, ...], optional: tuple[str, ...], expected: int | None, what: str
) -> tuple[pd.DataFrame, list[str]]:
    """The rows of ``steps.parquet`` (RunRecordsError when it cannot be read or lacks
    a column) and a note when their count is not ``expected``."""
    if not path.is_file():
        raise RunRecordsError(f"{path}: missing (the run's {what} records)")
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise RunRecordsError(
            f"{path}: reading Parquet needs pyarrow: pip install 'kvsim[parquet]'"
        ) from None
    try:
        names = pq.read_schema(path).names
        missing = [c for c in columns if c not in names]
        if missing:
            raise RunRecordsError(f"{path}: missing column(s) {', '.join(missing)}")
        wanted = [c for c in (*columns, *optional) if c in names]
        df = pq.read_table(path, columns=wanted).to_pandas()
    except RunRecordsError:
        raise
    except Exception as e:  # pyarrow raises its own types for a damaged file
        raise RunRecordsError(f"{path}: not readable as Parquet ({e})") from None
    notes = []
    if expected is not None and len(df) != expected:
        notes.append(f"{path.name} holds {len(df):,} of {expected:,} {what}: the plots are partial")
    return df, notes


def steps_mode(summary: dict[str, Any]) -> tuple[str, int | None]:
    """``(mode, expected rows)`` of a run's steps file from its summary: ``full``
    with ``num_steps`` rows unless ``steps_file`` says ``thin`` (its ``rows``) or
    ``none`` (0)."""
    info = summary.get("steps_file")
    mode = info.get("mode") if isinstance(info, dict) else None
    if mode == "thin":
        return "thin", _expected(info, "rows")
    if mode == "none":
        return "none", 0
    return "full", _expected(summary, "num_steps")


def count_lines(path: Path) -> tuple[int, bool]:
    """Newline characters in ``path`` and whether it ends in one (reads in 1 MiB blocks)."""
    count, last = 0, b"\n"
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            count += block.count(b"\n")
            last = block[-1:]
    return count, last == b"\n"


def _read_one(
    path: Path, columns: tuple[str, ...], optional: tuple[str, ...], expected: int | None, what: str
) -> tuple[pd.DataFrame, list[str]]:
    """The parsable rows of one CSV file and the notes about it.

    Contract: ``columns`` must be in the header (else RunRecordsError); rows are kept
    only if every column of ``columns + optional`` present parses as a number; the
    note about the row count compares the kept rows with ``expected`` (skipped when
    None). Notes name the file by its name (``steps.csv``).
    """
    name = path.name
    if not path.is_file():
        raise RunRecordsError(f"{path}: missing (the run's {what} records)")
    newlines, ends_in_newline = count_lines(path)
    try:
        df = pd.read_csv(path, on_bad_lines="skip", skip_blank_lines=False, low_memory=False)
    except pd.errors.EmptyDataError:
        raise RunRecordsError(f"{path}: empty (no header line)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise RunRecordsError(f"{path}: not readable as CSV ({e})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise RunRecordsError(
            f"{path}: header: missing column(s) {', '.join(missing)}; needed: {', '.join(columns)}"
        )
    notes: list[str] = []
    cut = 0 if ends_in_newline else 1  # a last line without its newline
    data_lines = newlines - 1 + cut  # lines after the header
    skipped = data_lines - len(df)  # lines pandas left out (too many fields)
    if cut and len(df) and len(df) != expected:  # all rows there: only the newline is gone
        df = df.iloc[:-1]
        notes.append(f"{name}: the last line is cut off mid-row (left out)")
    if skipped > 0:
        notes.append(f"{name}: {skipped:,} malformed line(s) with too many fields (left out)")
    numeric = [c for c in (*columns, *optional) if c in df.columns]
    parsed = as_numbers(df[numeric])
    bad = parsed.isna().any(axis=1).to_numpy()
    if bad.any():
        first = int(bad.argmax())
        where = f"line {first + 2}" if skipped <= 0 else f"data row {first + 1}"
        shown = ", ".join(
            f"{c} {'' if pd.isna(df[c].iloc[first]) else str(df[c].iloc[first])!r}"
            for c in numeric
            if pd.isna(parsed[c].iloc[first])
        )
        notes.append(
            f"{name}: {int(bad.sum()):,} row(s) with values that are not numbers (left out; "
            f"first: {where}: {shown})"
        )
    out = df.drop(columns=numeric).join(parsed)[~bad].reset_index(drop=True)
    if expected is not None and len(out) != expected:
        notes.append(f"{name} holds {len(out):,} of {expected:,} {what}: the plots are partial")
    return out, notes


def _expected(summary: dict[str, Any], key: str) -> int | None:
    value = summary.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_step_records(
    run_dir: Path, summary: dict[str, Any], follower: StepFollower | None = None
) -> tuple[pd.DataFrame | StepRows, list[str]]:
    """The steps file of ``run_dir`` (``steps.csv``, ``steps.parquet``, or none for
    ``--steps none``), checked against ``summary`` (``num_steps``, or the thinned count;
    absent: not checked): its usable rows (plotted columns numeric) and one note per
    problem, in file order. RunRecordsError when it cannot be read at all. A
    ``steps.csv``'s rows are not held: they are read again, in chunks, when binned
    (:meth:`reports.step_stream.StepRows.binned`). ``follower``: what followed the
    ``steps.csv`` while the run wrote it (:mod:`reports.step_follow`); its rows are used
    when it has them for this file."""
    run_dir = Path(run_dir)
    mode, expected_steps = steps_mode(summary)
    if mode == "none":
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in STEP_PLOT_COLUMNS}), []
    name = steps_file_name(summary)
    what = "step rows" if mode == "thin" else "steps"
    if name.endswith(".parquet"):
        return _read_parquet(
            run_dir / name, STEP_PLOT_COLUMNS, STEP_OPTIONAL_COLUMNS, expected_steps, what
        )
    # Possibly millions of rows: checked here, binned later, in chunks.
    from reports.step_stream import read_step_rows

    followed = follower.rows(run_dir / name, expected_steps, what) if follower else None
    if followed is not None:
        return followed, followed.notes
    rows = read_step_rows(
        run_dir / name, STEP_PLOT_COLUMNS, STEP_OPTIONAL_COLUMNS, expected_steps, what
    )
    return rows, rows.notes


def read_request_records(run_dir: Path, summary: dict[str, Any]) -> tuple[pd.DataFrame, list[str]]:
    """``requests.csv`` of ``run_dir``, checked against ``summary``'s ``num_finished``
    (absent: not checked): its usable rows and notes, as :func:`read_step_records`."""
    return _read_one(
        Path(run_dir) / "requests.csv",
        REQUEST_PLOT_COLUMNS,
        (),
        _expected(summary, "num_finished"),
        "finished requests",
    )
