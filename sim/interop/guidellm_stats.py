"""GuideLLM's distribution summaries (``guidellm.schemas.statistics``, report schema
version 2), computed for kvsim's records.

A summary is ``{mean, median, mode, variance, std_dev, min, max, count, total_sum,
percentiles: {p001 ... p999}, pdf: null}`` of a weighted sample: values with weights
form a discrete distribution (equal values merged), the percentiles are the first value
whose cumulative probability reaches the level. Rates (per second) weight the rate
around each event by the time it covers (half the gap to each neighbour); concurrency
weights each level by how long it holds. Events closer than
:data:`MERGE_THRESHOLD_S` are merged first, as GuideLLM does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

PERCENTILE_LEVELS = {
    "p001": 0.001,
    "p01": 0.01,
    "p05": 0.05,
    "p10": 0.1,
    "p25": 0.25,
    "p50": 0.5,
    "p75": 0.75,
    "p90": 0.9,
    "p95": 0.95,
    "p99": 0.99,
    "p999": 0.999,
}
MERGE_THRESHOLD_S = 1e-4
EPSILON = 1e-6


def summary(
    values: np.ndarray, weights: np.ndarray | None = None, count: int | None = None
) -> dict[str, Any]:
    """The distribution summary of ``values`` weighted by ``weights`` (1 each when
    None); ``count``: observations (default: the rounded sum of the weights)."""
    v = np.asarray(values, dtype=np.float64)
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=np.float64)
    if count is None:
        count = round(float(w.sum())) if v.size else 0
    if v.size == 0:
        zeros = dict.fromkeys(PERCENTILE_LEVELS, 0.0)
        return {
            "mean": 0.0, "median": 0.0, "mode": 0.0, "variance": 0.0, "std_dev": 0.0,
            "min": 0.0, "max": 0.0, "count": int(count), "total_sum": 0.0,
            "percentiles": zeros, "pdf": None,
        }  # fmt: skip
    uniq, inverse = np.unique(v, return_inverse=True)
    weight = np.zeros_like(uniq)
    np.add.at(weight, inverse, w)
    keep = weight > 0
    uniq, weight = uniq[keep], weight[keep]
    if weight.sum() <= EPSILON:
        weight = np.ones_like(uniq)
    prob = weight / weight.sum()
    cdf = np.cumsum(prob)
    pct = {
        k: float(uniq[min(int(np.searchsorted(cdf, q, side="left")), uniq.size - 1)])
        for k, q in PERCENTILE_LEVELS.items()
    }
    mean = float(np.dot(uniq, prob))
    variance = float(np.dot((uniq - mean) ** 2, prob))
    return {
        "mean": mean,
        "median": pct["p50"],
        "mode": float(uniq[int(np.argmax(prob))]),
        "variance": variance,
        "std_dev": math.sqrt(variance),
        "min": float(uniq[0]),
        "max": float(uniq[-1]),
        "count": int(count),
        "total_sum": mean * int(count),
        "percentiles": pct,
        "pdf": None,
    }


def _merge(times: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum the weights of equal times, then of times within the threshold of a group's
    first time."""
    uniq, inverse = np.unique(times, return_inverse=True)
    w = np.zeros_like(uniq)
    np.add.at(w, inverse, weights)
    if uniq.size < 2 or not np.any(np.diff(uniq) <= MERGE_THRESHOLD_S):
        return uniq, w
    starts = []
    i = 0
    n = uniq.size
    while i < n:
        starts.append(i)
        i = int(np.searchsorted(uniq, uniq[i] + MERGE_THRESHOLD_S, side="right"))
    idx = np.asarray(starts)
    return uniq[idx], np.add.reduceat(w, idx)


def rate_summary(
    times: np.ndarray, weights: np.ndarray, start: float | None = None, end: float | None = None
) -> dict[str, Any]:
    """The summary of an event rate (events or tokens per second) from event times and
    their weights, over ``[start, end]`` when given."""
    t = np.asarray(times, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if start is not None:
        keep = t >= start
        t, w = np.concatenate(([start], t[keep])), np.concatenate(([0.0], w[keep]))
    if end is not None:
        keep = t <= end
        t, w = np.concatenate((t[keep], [end])), np.concatenate((w[keep], [0.0]))
    t, w = _merge(t, w)
    if t.size <= 1:
        return summary(np.zeros(0), count=int(t.size))
    mid = (t[1:] + t[:-1]) / 2
    dur = np.empty_like(t)
    dur[0] = mid[0] - t[0]
    dur[1:-1] = mid[1:] - mid[:-1]
    dur[-1] = max(t[-1] - mid[-1], EPSILON)
    return summary(w / dur, dur, count=round(float(w.sum())))


def concurrency_summary(
    starts: np.ndarray, ends: np.ndarray, start: float | None = None, end: float | None = None
) -> dict[str, Any]:
    """The summary of how many intervals ``[starts[i], ends[i]]`` are open, weighted by
    time, over ``[start, end]`` when given."""
    s = np.asarray(starts, dtype=np.float64)
    e = np.asarray(ends, dtype=np.float64)
    keep = np.ones(s.shape, dtype=bool)
    if start is not None:
        keep &= e >= start
    if end is not None:
        keep &= s <= end
    s, e = s[keep], e[keep]
    count = int(s.size)
    if count == 0:
        return summary(np.zeros(0), count=0)
    t, d = _merge(np.concatenate((s, e)), np.concatenate((np.ones(count), -np.ones(count))))
    if start is not None:
        i = int(np.searchsorted(t, start, side="left"))
        t, d = np.concatenate(([start], t[i:])), np.concatenate(([d[:i].sum()], d[i:]))
    if end is not None:
        i = int(np.searchsorted(t, end, side="right"))
        t, d = np.concatenate((t[:i], [end])), np.concatenate((d[:i], [0.0]))
    level = np.clip(np.cumsum(d), 0, None)
    if level.size <= 1:
        return summary(level[:1], count=count)
    dur = np.clip(np.diff(t), 0, None)
    if not np.any(dur > 0):
        return summary(np.zeros(0), count=count)
    return summary(level[:-1], dur, count=count)


def by_status(successful: dict[str, Any], errored: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``StatusDistributionSummary``: kvsim has no incomplete requests; errored
    ones (rejected prompts) carry no latencies, so ``total`` is the successful one."""
    empty = summary(np.zeros(0))
    return {
        "successful": successful,
        "incomplete": empty,
        "errored": errored if errored is not None else empty,
        "total": successful,
    }
