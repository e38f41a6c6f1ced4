"""Per-step records, streamed to ``steps.csv`` as the simulation runs (per-request
records: :mod:`sim.records.request_recorder`).

The columns are the contract of INTERFACES.md (:data:`STEP_COLUMNS`, the fields of
:class:`sim.records.step_row.StepRow`).
Rows go to disk in chunks so memory does not grow with the run's length; the few
columns the summary needs are kept as compact ``array`` buffers.
"""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

from sim.offload import ChunkWriter
from sim.records.step_row import STEP_COLUMNS, DecodeRows, StepRow
from sim.records.step_rows import StepChunk, StepRowWriter
from sim.records.step_thin import NullStepWriter, ThinStepWriter, check_mode

_STEP_CHUNK_ROWS = 8192  # steps.csv rows handed over at once (~250 kB pickled)


class ReplicaSteps:
    """One replica's step aggregates (see :class:`StepRecorder`)."""

    __slots__ = (
        "last_waiting",
        "longest_stuck",
        "num_steps",
        "prefix_hits",
        "prefix_queries",
        "stuck_preempted",
        "stuck_run",
        "waiting",
        "waiting_s",
    )

    def __init__(self) -> None:
        self.num_steps = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.waiting_s = array("d")  # step start times where num_waiting changes
        self.waiting = array("q")  # num_waiting from then on
        self.last_waiting = 0
        self.stuck_run = 0  # consecutive steps decoding nothing
        self.stuck_preempted = 0  # preemptions within that streak
        self.longest_stuck = 0  # longest streak with a preemption (livelock)


class StepRecorder:
    """Writes ``steps.csv``; keeps only what the summary needs.

    Kept per step: start, duration and KV usage (8-byte floats, for the
    duration-weighted mean and percentiles over the run and its window) and, with
    several replicas, the replica id (2 bytes); per replica: step and prefix counts,
    the waiting-queue length where it changes (for the queue verdict) and the livelock
    streak (see :mod:`sim.records.verdict`). Everything else goes to disk only. Rows are
    :class:`sim.records.step_row.StepRow` s, stretches of decode-only steps
    :class:`sim.records.step_row.DecodeRows`.
    """

    def __init__(
        self,
        path: Path,
        helper: bool = False,
        mode: str = "full",
        fmt: str = "csv",
        num_replicas: int = 1,
    ) -> None:
        """``helper``: format and write the rows in a helper process (:mod:`sim.offload`;
        full CSV rows only). ``mode``: ``full``, ``thin`` or ``none``
        (:mod:`sim.records.step_thin`); ``fmt``: ``csv`` or ``parquet``
        (:mod:`sim.records.step_parquet`).
        ``num_replicas``: the replicas writing here (fast-forward writes its rows in
        bulk only when there is one, so row order never changes)."""
        if num_replicas < 1:
            raise ValueError(f"num_replicas: must be >= 1 (got {num_replicas})")
        self.num_replicas = num_replicas
        self.mode = check_mode(mode)
        self.fmt = fmt
        self.file_name = path.name
        self._thin: ThinStepWriter | None = None
        self._no_rows: NullStepWriter | None = None
        if mode == "thin":
            self._thin = ThinStepWriter(path, STEP_COLUMNS, fmt=fmt)
            self._out = ChunkWriter(self._thin, False, "steps writer")
        elif mode == "none":
            self._no_rows = NullStepWriter()
            self._out = ChunkWriter(self._no_rows, False, "steps writer")
        elif fmt == "parquet":
            from sim.records.step_parquet import ParquetStepWriter

            self._out = ChunkWriter(ParquetStepWriter(path, STEP_COLUMNS), False, "steps writer")
        else:
            self._out = ChunkWriter(StepRowWriter(path, STEP_COLUMNS), helper, "steps.csv writer")
        self._chunk = StepChunk()
        self._chunk_rows = 0
        self.start_s = array("d")
        self.duration_s = array("d")
        self.kv_usage = array("d")
        self.replica = array("H")  # with several replicas: each step's
        self.per_replica: dict[int, ReplicaSteps] = {}

    @property
    def num_steps(self) -> int:
        """Steps recorded, all replicas."""
        return sum(r.num_steps for r in self.per_replica.values())

    @property
    def prefix_queries(self) -> int:
        """Prefix-cache query tokens, all replicas."""
        return sum(r.prefix_queries for r in self.per_replica.values())

    @property
    def prefix_hits(self) -> int:
        """Prefix-cache hit tokens, all replicas."""
        return sum(r.prefix_hits for r in self.per_replica.values())

    def _replica(self, replica: int) -> ReplicaSteps:
        rec = self.per_replica.get(replica)
        if rec is None:
            rec = self.per_replica[replica] = ReplicaSteps()
        return rec

    def add(self, row: StepRow) -> None:
        """One step's row."""
        self._chunk.items.append(row.values())
        self._chunk_rows += 1
        if self._chunk_rows >= _STEP_CHUNK_ROWS:
            self._flush()
        start_s = row.start_s
        replica = row.replica
        self.start_s.append(start_s)
        self.duration_s.append(row.duration_s)
        self.kv_usage.append(row.kv_usage)
        if self.num_replicas > 1:
            self.replica.append(replica)
        rec = self._replica(replica)
        rec.num_steps += 1
        rec.prefix_queries += row.prefix_queries
        rec.prefix_hits += row.prefix_hits
        num_waiting = row.num_waiting
        if num_waiting != rec.last_waiting:
            rec.waiting_s.append(start_s)
            rec.waiting.append(num_waiting)
            rec.last_waiting = num_waiting
        if row.num_decode_tokens == 0:
            rec.stuck_run += 1
            rec.stuck_preempted += row.num_preempted
            if rec.stuck_preempted > 0 and rec.stuck_run > rec.longest_stuck:
                rec.longest_stuck = rec.stuck_run
        else:
            rec.stuck_run = rec.stuck_preempted = 0

    def add_decode_steps(self, rows: DecodeRows, starts: list[float] | None = None) -> None:
        """The rows of a stretch of decode-only steps (fast-forward), in bulk:
        byte-identical to calling :meth:`add` with each of ``rows.row(j, ...)``.
        ``starts``: the steps' starts where the caller has them (equal to
        ``rows.starts()``, which is computed otherwise)."""
        durations = rows.durations
        k = len(durations)
        chunk = self._chunk
        chunk.items.append(rows.head())
        # array.fromlist: the same values as extend, and faster from a list.
        chunk.durations.fromlist(durations)
        chunk.free.fromlist(rows.num_free_blocks)
        chunk.cached.fromlist(rows.num_cached_blocks)
        chunk.cached_free.fromlist(rows.num_cached_free_blocks)
        self._chunk_rows += k
        if self._chunk_rows >= _STEP_CHUNK_ROWS:
            self._flush()
        if k:
            self.start_s.fromlist(rows.starts() if starts is None else starts)
        self.duration_s.fromlist(durations)
        self.kv_usage.fromlist(rows.kv_usage())
        replica = rows.replica
        if self.num_replicas > 1:
            self.replica.fromlist([replica] * k)
        rec = self._replica(replica)
        rec.num_steps += k
        if rec.last_waiting:
            rec.waiting_s.append(rows.start0_s)
            rec.waiting.append(0)
            rec.last_waiting = 0
        rec.stuck_run = rec.stuck_preempted = 0

    def _flush(self) -> None:
        if self._chunk.items:
            self._out.write(self._chunk)
            self._chunk = StepChunk()
            self._chunk_rows = 0

    def finish(self) -> None:
        """Hand over the remaining rows and end the file without waiting for the
        helper that writes it (:meth:`close` waits); :meth:`file_info` holds from here."""
        self._flush()
        self._out.finish()

    def close(self) -> None:
        """Write the remaining rows and close the file (waits for the helper)."""
        try:
            self._flush()
        finally:
            self._out.close()

    def file_info(self) -> dict[str, Any]:
        """What the steps file holds (``summary.json``'s ``steps_file``; after
        :meth:`finish` or :meth:`close`): ``mode`` and ``rows``, for ``thin`` also ``bucket_s`` and
        ``max_rows`` (:mod:`sim.records.step_thin`); ``file`` (its name) unless ``none``."""
        if self._no_rows is not None:
            return self._no_rows.info()
        info = (
            self._thin.info()
            if self._thin is not None
            else {"mode": "full", "rows": self.num_steps}
        )
        info["file"] = self.file_name
        return info
