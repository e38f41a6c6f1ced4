"""Steady-state output analysis: a run's measurement window and confidence intervals.

A run starts empty (no queue, no cached blocks) and ends with a drain after the last
arrival; neither is the steady state an operator plans for. The **measurement
window** keeps what lies between:

- **Warm-up** is cut with MSER-5 (White, K. P., "An effective truncation heuristic
  for bias reduction in simulation output", *Simulation* 69(6), 1997; compared in
  White, Cobb & Spratt, *Simulation* 75(4), 2000): the per-request TTFT, TPOT and
  number-in-system-at-arrival series, in arrival order, are averaged in batches of
  5; the truncation ``d`` (batches) minimises
  ``MSER(d) = sum_{j>d} (Z_j - mean(Z_{>d}))^2 / (k - d)^2`` over ``d <= k/2``, and
  the latest of the three series' truncations is used. A minimum at the search limit
  means no steady part was found (a warning).
- **The end** is the last arrival: the drain after it is excluded.

Window figures are over the requests that *arrive* in the window (each finishes
whenever it finishes, so long requests are not censored), except throughput, which
counts *completions* within the window per second of window.

**Confidence intervals** (95%) come from non-overlapping batch means (Law & Kelton,
*Simulation Modeling and Analysis*, 5th ed., ch. 9.5.3): the window's requests in
arrival order are cut into ``k`` equal batches (``k`` = 20, at least 10); a mean's
interval is ``t_{k-1, 0.975} * s / sqrt(k)`` around the window estimate; a
percentile's uses the spread of the batches' own percentiles (batch quantiles),
with 10 to 20 batches each holding at least 5 requests above that percentile (p90
needs 500 requests in the window, p99 5,000); throughput's uses completions in ``k`` equal slices of
the window. A window too short for an interval gives ``null`` and a warning instead
of a precise-looking number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

MSER_BATCH = 5
NUM_BATCHES = 20
MIN_BATCHES = 10
TAIL_PER_BATCH = 5
"""A batch percentile needs this many requests above it."""
PERCENTILES = (50, 90, 99)
CONFIDENCE = 0.95


def mser_truncation(series: np.ndarray, batch: int = MSER_BATCH) -> tuple[int, bool]:
    """MSER-``batch`` truncation of ``series``: ``(observations to drop, at_limit)``.

    ``at_limit``: the minimum sat at the search limit (half the series), so the series
    shows no steady part. Fewer than four batches, or a constant series: nothing is
    dropped.
    """
    k = len(series) // batch
    if k < 4:
        return 0, False
    z = np.asarray(series[: k * batch], dtype=np.float64).reshape(k, batch).mean(axis=1)
    scale = float(np.abs(z).max())
    if scale == 0.0 or float(np.ptp(z)) <= 1e-9 * scale:
        return 0, False  # a constant series has no warm-up
    z = z - z.mean()  # centred: the running sums below lose less to cancellation
    # Sums over the tail z[d:] for every d, from the end (one pass, float64).
    tail_sum = np.cumsum(z[::-1])[::-1]
    tail_sq = np.cumsum((z * z)[::-1])[::-1]
    n = np.arange(k, 0, -1, dtype=np.float64)  # k - d
    sse = tail_sq - tail_sum * tail_sum / n
    limit = k // 2
    mser = np.maximum(sse[: limit + 1], 0.0) / (n[: limit + 1] ** 2)
    d = int(np.argmin(mser))
    return d * batch, d == limit


@dataclass(frozen=True)
class Window:
    """The measurement window: ``[start_s, end_s]`` and the requests arriving in it
    (``mask`` over the finished requests)."""

    start_s: float
    end_s: float
    warmup_requests: int
    mask: np.ndarray
    no_steady_part: bool


def in_system_at_arrival(arrival_s: np.ndarray, finish_s: np.ndarray) -> np.ndarray:
    """For each request in arrival order, the requests in the system when it arrives
    (arrived at or before it, not yet finished)."""
    arrivals = np.sort(arrival_s)
    finishes = np.sort(finish_s)
    arrived = np.arange(1, arrivals.size + 1)
    return (arrived - np.searchsorted(finishes, arrivals, side="right")).astype(np.float64)


def find_window(
    arrival_s: np.ndarray, finish_s: np.ndarray, ttft_s: np.ndarray, tpot_s: np.ndarray
) -> Window:
    """The window of a run's finished requests (arrays in any order, one entry per
    request; ``tpot_s`` NaN where a request has one output token). MSER-5 runs on the
    TTFT, TPOT and number-in-system-at-arrival series (the latter catches a system
    still filling while its latencies look flat); the latest cut wins."""
    order = np.argsort(arrival_s, kind="stable")
    arrivals = arrival_s[order]
    cut = 0
    at_limit = False
    in_system = in_system_at_arrival(arrival_s, finish_s)
    for series in (ttft_s[order], tpot_s[order], in_system):
        series = series[np.isfinite(series)]
        drop, limit = mser_truncation(series)
        if len(series) and drop:
            # The same share of the arrival-ordered requests (TPOT skips one-token ones).
            drop = int(round(drop * len(arrivals) / len(series)))
        cut = max(cut, drop)
        at_limit = at_limit or limit
    if len(arrivals) == 0:
        return Window(0.0, 0.0, 0, np.zeros(0, dtype=bool), False)
    start = float(arrivals[min(cut, len(arrivals) - 1)])
    end = float(arrivals[-1])
    mask = (arrival_s >= start) & (arrival_s <= end)
    return Window(start, end, int(cut), mask, at_limit)


_T975 = {  # Student's t, 0.975 quantile, by degrees of freedom (k - 1 batches)
    9: 2.2621572,
    10: 2.2281389,
    11: 2.2009852,
    12: 2.1788128,
    13: 2.1603687,
    14: 2.1447867,
    15: 2.1314495,
    16: 2.1199053,
    17: 2.1098155,
    18: 2.1009220,
    19: 2.0930241,
}


TREND_SLICES = 10
TREND_T = 2.3060041  # Student's t, 0.975 quantile, 8 degrees of freedom
TREND_GROWTH = 0.1
TREND_MIN_RISE = 5.0
"""The number in system must rise, significantly, by more than ``TREND_GROWTH`` of its
mean and by at least ``TREND_MIN_RISE`` requests over the window to count as rising."""


def trend(arrival_s: np.ndarray, finish_s: np.ndarray, start: float, end: float) -> dict:
    """Does the number in system rise over ``[start, end]``?

    The window is cut into 10 equal slices; each slice's time-average number in system
    (the overlap of every request's ``[arrival, finish]`` with the slice) is one batch
    mean; the least-squares slope of those means against time is tested with
    Student's t (8 degrees of freedom, two-sided 95%). ``rising``: the slope is
    significant and the rise over the window exceeds :data:`TREND_GROWTH` of the mean
    and :data:`TREND_MIN_RISE` requests.
    Returns ``{rising, growth_frac, t, mean_in_system}``.
    """
    span = end - start
    if span <= 0 or arrival_s.size < 2 * TREND_SLICES:
        return {"rising": False, "growth_frac": 0.0, "t": 0.0, "mean_in_system": 0.0}
    edges = np.linspace(start, end, TREND_SLICES + 1)
    width = span / TREND_SLICES
    means = np.empty(TREND_SLICES)
    for j in range(TREND_SLICES):
        lo, hi = edges[j], edges[j + 1]
        overlap = np.minimum(finish_s, hi) - np.maximum(arrival_s, lo)
        means[j] = float(np.clip(overlap, 0.0, None).sum()) / width
    x = (edges[:-1] + edges[1:]) / 2 - (start + end) / 2
    sxx = float((x * x).sum())
    slope = float((x * (means - means.mean())).sum()) / sxx
    resid = means - means.mean() - slope * x
    se = math.sqrt(float((resid * resid).sum()) / (TREND_SLICES - 2) / sxx)
    mean = float(means.mean())
    t = slope / se if se > 0 else (math.inf if slope > 0 else 0.0)
    growth = slope * span / mean if mean > 0 else 0.0
    return {
        "rising": bool(t > TREND_T and growth > TREND_GROWTH and slope * span >= TREND_MIN_RISE),
        "growth_frac": growth,
        "t": t if math.isfinite(t) else 1e9,
        "mean_in_system": mean,
    }


def _t(k: int) -> float:
    """The t quantile of a 95% interval from ``k`` batches (10 <= k <= 20)."""
    return _T975[k - 1]


def _batches(n: int) -> int:
    """Batches for ``n`` observations: 20, or fewer down to 10; 0 when too few."""
    k = min(NUM_BATCHES, n // 5)
    return k if k >= MIN_BATCHES else 0


def _interval(center: float, batch_values: np.ndarray) -> list[float] | None:
    k = len(batch_values)
    if k < MIN_BATCHES:
        return None
    half = _t(k) * float(np.std(batch_values, ddof=1)) / math.sqrt(k)
    return [center - half, center + half]


def distribution(values: np.ndarray) -> dict[str, Any]:
    """``{mean, p50, p90, p99, ci95: {mean, p50, p90, p99}}`` of a window sample in
    arrival order (seconds); an interval is ``null`` when the sample cannot give one."""
    values = values[np.isfinite(values)]
    if values.size == 0:
        zero = {"mean": 0.0, **{f"p{q}": 0.0 for q in PERCENTILES}}
        return {**zero, "ci95": {key: None for key in zero}}
    point = {"mean": float(values.mean())}
    point.update(
        {f"p{q}": float(v) for q, v in zip(PERCENTILES, np.percentile(values, PERCENTILES))}
    )
    ci: dict[str, list[float] | None] = {key: None for key in point}
    k = _batches(values.size)
    if k:
        ci["mean"] = _interval(point["mean"], _split(values, k).mean(axis=1))
    for q in PERCENTILES:
        k = min(NUM_BATCHES, values.size // min_batch_for(q))
        if k >= MIN_BATCHES:
            ci[f"p{q}"] = _interval(point[f"p{q}"], np.percentile(_split(values, k), q, axis=1))
    return {**point, "ci95": ci}


def min_batch_for(q: int) -> int:
    """Smallest batch whose ``q``-th percentile has :data:`TAIL_PER_BATCH` requests
    above it (p50: 10, p90: 50, p99: 500)."""
    return math.ceil(TAIL_PER_BATCH * 100 / (100 - q) - 1e-9)


def _split(values: np.ndarray, k: int) -> np.ndarray:
    """``k`` equal consecutive batches (the remainder at the end is dropped)."""
    size = values.size // k
    return values[: k * size].reshape(k, size)


def rate(times: np.ndarray, start: float, end: float) -> dict[str, Any]:
    """Events per second in ``[start, end]`` with a batch-means interval over ``k``
    equal slices of the window."""
    span = end - start
    inside = times[(times >= start) & (times <= end)]
    if span <= 0:
        return {"value": 0.0, "ci95": None}
    value = inside.size / span
    k = _batches(inside.size)
    ci = None
    if k:
        counts, _ = np.histogram(inside, bins=k, range=(start, end))
        ci = _interval(value, counts / (span / k))
    return {"value": value, "ci95": ci}
