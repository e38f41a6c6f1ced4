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


def _level(bins: np.ndarray, weights: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Weighted mean of ``values`` per bin; empty bins keep the previous bin's value."""
    total = np.bincount(bins, weights, minlength=n)
    sums = np.bincount(bins, weights * values, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(total > 0, sums / np.where(total > 0, total, 1.0), np.nan)
    return pd.Series(mean).ffill().fillna(0.0).to_numpy()


def bin_steps(
    steps: pd.DataFrame, usable_blocks: int, end_s: float | None = None, num_bins: int = 0
) -> BinnedSteps | None:
    """The rows of ``steps`` (``steps.csv`` columns) on ``num_bins`` bins from 0 to
    ``end_s`` (default: the end of the last row; ``num_bins`` 0: as many as the most
    rows of a replica, at most :data:`MAX_BINS`). ``usable_blocks``: KV blocks a
    replica can hand out (``num_gpu_blocks - 1``). None without rows."""
    if steps.empty:
        return None
    start = steps["start_s"].to_numpy(dtype=np.float64)
    duration = steps["duration_s"].to_numpy(dtype=np.float64) if "duration_s" in steps else None
    last = float(np.max(start + (duration if duration is not None else 0.0)))
    end = max(end_s or 0.0, last, 1e-9)
    per_replica = steps.groupby("replica", sort=True)
    n = num_bins or int(min(MAX_BINS, max(1, per_replica.size().max())))
    edges = np.linspace(0.0, end, n + 1)
    out = BinnedSteps(edges, [], [], [], [], [], [], [])
    for replica, df in per_replica:
        t = df["start_s"].to_numpy(dtype=np.float64)
        bins = np.clip((t / end * n).astype(np.int64), 0, n - 1)
        w = df["duration_s"].to_numpy(dtype=np.float64) if duration is not None else np.ones(len(t))
        w = w + 1e-12  # zero-length steps still count
        kv = df["kv_usage"].to_numpy(dtype=np.float64) if "kv_usage" in df else None
        if kv is None:
            kv = 1.0 - df["num_free_blocks"].to_numpy(dtype=np.float64) / max(usable_blocks, 1)
        cached = (
            df["num_cached_free_blocks"].to_numpy(dtype=np.float64) / max(usable_blocks, 1)
            if "num_cached_free_blocks" in df
            else np.zeros(len(t))
        )
        peak = np.full(n, np.nan)
        np.fmax.at(peak, bins, kv)
        out.replicas.append(int(replica))
        out.kv.append(_level(bins, w, kv, n))
        out.kv_max.append(pd.Series(peak).ffill().fillna(0.0).to_numpy())
        out.cached_free.append(_level(bins, w, cached, n))
        out.running.append(_level(bins, w, df["num_running"].to_numpy(dtype=np.float64), n))
        out.waiting.append(_level(bins, w, df["num_waiting"].to_numpy(dtype=np.float64), n))
        out.preempted.append(
            np.bincount(bins, df["num_preempted"].to_numpy(dtype=np.float64), minlength=n)
        )
    return out
