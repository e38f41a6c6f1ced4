"""A run's step rows on a common time grid, per replica, for the timeline plots.

Rows (``steps.csv``: one per step, or per time bucket when thinned) fall into equal
time bins by their ``start_s``. Per bin and replica: levels (KV usage, cached free
blocks, running, waiting) are means weighted by ``duration_s`` (the time each row
covers), also the highest KV usage; preemptions are summed. A bin where a replica ran
no step keeps the replica's previous level (0 before its first step). Replicas share
the bins, so their series add up and line up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

MAX_BINS = 600
"""The most bins of a timeline (about one per pixel column of the plot)."""


@dataclass
class BinnedSteps:
    """``edges`` (s, ``num_bins + 1``) and per replica (in id order) one array per
    series, each ``num_bins`` long: ``kv`` and ``kv_max`` (fraction of usable blocks in
    use), ``cached_free`` (fraction: cached blocks no request holds), ``running``,
    ``waiting`` (requests), ``preempted`` (preemptions in the bin)."""

    edges: np.ndarray
    replicas: list[int]
    kv: list[np.ndarray]
    kv_max: list[np.ndarray]
    cached_free: list[np.ndarray]
    running: list[np.ndarray]
    waiting: list[np.ndarray]
    preempted: list[np.ndarray]

    @property
    def centers(self) -> np.ndarray:
        """Bin midpoints (s)."""
        return (self.edges[:-1] + self.edges[1:]) / 2

    @property
    def width_s(self) -> float:
        """Width of one bin (s)."""
        return float(self.edges[1] - self.edges[0]) if len(self.edges) > 1 else 0.0


def _level(total: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """Weighted mean per bin from the bins' weight ``total`` and weighted ``sums``;
    empty bins keep the previous bin's value."""
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(total > 0, sums / np.where(total > 0, total, 1.0), np.nan)
    return pd.Series(mean).ffill().fillna(0.0).to_numpy()


class _ReplicaBins:
    """One replica's running sums over its rows so far, in row order (``np.add.at``
    adds in index order from 0.0, as ``np.bincount`` does, so rows given in several
    chunks sum to the same bits as all at once)."""

    __slots__ = ("cached", "kv", "peak", "preempted", "running", "total", "waiting")

    def __init__(self, n: int) -> None:
        self.total = np.zeros(n)  # weight (s) per bin
        self.kv = np.zeros(n)  # weight x KV usage
        self.cached = np.zeros(n)  # weight x cached free fraction
        self.running = np.zeros(n)  # weight x running requests
        self.waiting = np.zeros(n)  # weight x waiting requests
        self.preempted = np.zeros(n)  # preemptions
        self.peak = np.full(n, np.nan)  # highest KV usage


class StepBinner:
    """Bins step rows given in consecutive chunks (file order) on ``num_bins`` equal
    bins from 0 to ``end_s`` (s); :meth:`result` is what :func:`bin_steps` returns for
    all the rows at once, bit for bit. ``usable_blocks``: KV blocks a replica can hand
    out; ``has_duration``: the rows have ``duration_s`` (else each weighs the same)."""

    def __init__(self, end_s: float, num_bins: int, usable_blocks: int, has_duration: bool) -> None:
        self.end_s = end_s
        self.num_bins = num_bins
        self.usable_blocks = usable_blocks
        self.has_duration = has_duration
        self._replicas: dict[int, _ReplicaBins] = {}

    def add(self, steps: pd.DataFrame) -> None:
        """The next rows (``steps.csv`` columns, numbers), after those added before."""
        n, end, usable = self.num_bins, self.end_s, max(self.usable_blocks, 1)
        for replica, df in steps.groupby("replica", sort=True):
            acc = self._replicas.get(int(replica))
            if acc is None:
                acc = self._replicas[int(replica)] = _ReplicaBins(n)
            t = df["start_s"].to_numpy(dtype=np.float64)
            bins = np.clip((t / end * n).astype(np.int64), 0, n - 1)
            if self.has_duration:
                w = df["duration_s"].to_numpy(dtype=np.float64)
            else:
                w = np.ones(len(t))
            w = w + 1e-12  # zero-length steps still count
            kv = df["kv_usage"].to_numpy(dtype=np.float64) if "kv_usage" in df else None
            if kv is None:
                kv = 1.0 - df["num_free_blocks"].to_numpy(dtype=np.float64) / usable
            cached = (
                df["num_cached_free_blocks"].to_numpy(dtype=np.float64) / usable
                if "num_cached_free_blocks" in df
                else np.zeros(len(t))
            )
            np.fmax.at(acc.peak, bins, kv)
            np.add.at(acc.total, bins, w)
            np.add.at(acc.kv, bins, w * kv)
            np.add.at(acc.cached, bins, w * cached)
            np.add.at(acc.running, bins, w * df["num_running"].to_numpy(dtype=np.float64))
            np.add.at(acc.waiting, bins, w * df["num_waiting"].to_numpy(dtype=np.float64))
            np.add.at(acc.preempted, bins, df["num_preempted"].to_numpy(dtype=np.float64))

    def result(self) -> BinnedSteps:
        """The binned series of every replica that had a row, in id order."""
        edges = np.linspace(0.0, self.end_s, self.num_bins + 1)
        out = BinnedSteps(edges, [], [], [], [], [], [], [])
        for replica in sorted(self._replicas):
            acc = self._replicas[replica]
            out.replicas.append(replica)
            out.kv.append(_level(acc.total, acc.kv))
            out.kv_max.append(pd.Series(acc.peak).ffill().fillna(0.0).to_numpy())
            out.cached_free.append(_level(acc.total, acc.cached))
            out.running.append(_level(acc.total, acc.running))
            out.waiting.append(_level(acc.total, acc.waiting))
            out.preempted.append(acc.preempted)
        return out


def bin_end(last_s: float, end_s: float | None) -> float:
    """The timeline's end (s): ``end_s`` or the end of the last row ``last_s``,
    whichever is later (never 0)."""
    return max(end_s or 0.0, last_s, 1e-9)


def bin_count(max_rows: int, num_bins: int = 0) -> int:
    """Bins of a timeline: ``num_bins``, or (0) as many as the most rows of a replica
    ``max_rows``, at most :data:`MAX_BINS`."""
    return num_bins or int(min(MAX_BINS, max(1, max_rows)))


def bin_steps(
    steps: pd.DataFrame, usable_blocks: int, end_s: float | None = None, num_bins: int = 0
) -> BinnedSteps | None:
    """The rows of ``steps`` (``steps.csv`` columns) on ``num_bins`` bins from 0 to
    ``end_s`` (default: the end of the last row; ``num_bins`` 0: as many as the most
    rows of a replica, at most :data:`MAX_BINS`). ``usable_blocks``: KV blocks a
    replica can hand out (``num_gpu_blocks - 1``). None without rows. Rows too many
    to hold at once: :class:`StepBinner` over chunks."""
    if steps.empty:
        return None
    start = steps["start_s"].to_numpy(dtype=np.float64)
    has_duration = "duration_s" in steps
    duration = steps["duration_s"].to_numpy(dtype=np.float64) if has_duration else None
    last = float(np.max(start + (duration if duration is not None else 0.0)))
    n = bin_count(int(steps.groupby("replica", sort=True).size().max()), num_bins)
    binner = StepBinner(bin_end(last, end_s), n, usable_blocks, has_duration)
    binner.add(steps)
    return binner.result()
