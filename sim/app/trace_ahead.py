"""A trace read by a helper process while ``kvsim run`` imports the rest of itself.

Reading and validating a trace (``workloads.traces.detect.read_trace``) is on a run's
critical path before the first simulated event: about 60 ms for 20,000 JSONL lines, at a
time the run is still importing its engine, the catalog and the run-directory code
(about 85 ms). :func:`start`, called once the command line is parsed, forks a helper
(:class:`sim.offload.ChunkReader`, where :func:`sim.offload.allowed`) that reads the
named trace and sends back the table; :func:`read_trace`, which the run's set-up uses in
place of ``workloads.traces.detect.read_trace``, takes that table when it is for the
same path and label and the file has not changed since (size, modification time, inode),
and reads in process otherwise. Any error in the helper (the trace is bad, unreadable,
or the helper died) makes :func:`read_trace` read in process, so a bad trace raises the
same error, with the same message, as without a helper. The table is the same either
way: the same function reads the same bytes. A helper that is never taken is stopped
when the command ends (:func:`stop_all`), or at the latest when the process exits.
"""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Iterator
from pathlib import Path

from sim import offload
from workloads.loader import preset_path
from workloads.traces.detect import TRACE_SUFFIXES
from workloads.traces.detect import read_trace as read_in_process
from workloads.traces.table import TraceTable

_Stamp = tuple[int, int, int]
"""A file's size, modification time (ns) and inode."""

_pending: dict[str, tuple[offload.ChunkReader, _Stamp]] = {}
"""Helpers started and not taken yet, by the workload argument they read."""


def _stamp(path: Path) -> _Stamp | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def start(workload: str) -> None:
    """Read the trace ``workload`` names (``kvsim run``'s argument, as the run's set-up
    will read it: its own text as the path and as the label in messages) in a helper;
    nothing for a preset, a workload YAML, a name that is not a file, or where helpers
    are not used."""
    if workload in _pending or preset_path(workload) is not None:
        return
    path = Path(workload)
    if path.suffix.lower() not in TRACE_SUFFIXES or not offload.allowed():
        return
    stamp = _stamp(path)
    if stamp is None:
        return

    def produce() -> Iterator[TraceTable | None]:
        try:
            table = read_in_process(path, workload)
        except Exception:  # the caller reads again and raises it, as without a helper
            yield None
            return
        yield table

    if not _pending:
        atexit.register(stop_all)
    _pending[workload] = (offload.ChunkReader(produce, "trace reader"), stamp)


def read_trace(path: Path, file: str | None = None) -> TraceTable:
    """``workloads.traces.detect.read_trace(path, file)``, from the helper :func:`start`
    started for it when there is one and the file is as it was then."""
    started = _pending.pop(str(path), None) if file == str(path) else None
    if started is not None:
        reader, stamp = started
        table: TraceTable | None = None
        with contextlib.suppress(Exception):  # whatever it was: read in process
            table = reader.next()
        reader.close()
        if table is not None and _stamp(path) == stamp:
            return table
    return read_in_process(path, file)


def stop_all() -> None:
    """Stop and reap every helper not taken (the run ended before its set-up read the
    trace: a bad flag, an error): a process that goes on (tests, a caller of the CLI in
    process) keeps none of them."""
    while _pending:
        reader, _ = _pending.popitem()[1]
        with contextlib.suppress(OSError, ChildProcessError):
            reader.close()


def pending() -> list[str]:
    """The workloads whose helpers have not been taken (for tests)."""
    return list(_pending)
