"""Statistics the exports share: numpy's percentiles of a sample given as values with
repeat counts (without materialising the repeats), and vLLM's per-second peaks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

TOKEN_CHUNK = 4_000_000
"""Most token times materialised at once when counting tokens per second."""


def repeated_percentiles(
    values: np.ndarray, counts: np.ndarray, qs: Sequence[float]
) -> list[float]:
    """``np.percentile(np.repeat(values, counts), qs)`` (linear method) without the
    repeated array: exact, in O(len(values) log len(values)). Zeros for an empty sample
    (as vLLM's ``np.percentile(x or 0, q)``)."""
    keep = counts > 0
    v, c = values[keep], counts[keep]
    n = int(c.sum())
    if n == 0:
        return [0.0 for _ in qs]
    order = np.argsort(v, kind="stable")
    v, c = v[order], c[order]
    ends = np.cumsum(c)  # element i of the repeated array is v[searchsorted(ends, i, 'right')]
    out = []
    for q in qs:
        h = (n - 1) * float(q) / 100.0
        lo = int(np.floor(h))
        hi = min(lo + 1, n - 1)
        a = v[np.searchsorted(ends, lo, side="right")]
        b = v[np.searchsorted(ends, hi, side="right")]
        out.append(float(a + (h - lo) * (b - a)))
    return out


def repeated_mean_std(values: np.ndarray, counts: np.ndarray) -> tuple[float, float]:
    """Mean and population standard deviation (``np.std``, ddof 0) of the repeated
    sample; zeros when empty."""
    n = float(counts.sum())
    if n == 0:
        return 0.0, 0.0
    mean = float(np.dot(values, counts) / n)
    var = float(np.dot((values - mean) ** 2, counts) / n)
    return mean, var**0.5


def token_times_chunks(
    first_s: np.ndarray, last_s: np.ndarray, tokens: np.ndarray, chunk: int = TOKEN_CHUNK
):
    """Yield arrays of output-token times, ``tokens[i]`` of them per request spaced
    evenly from ``first_s[i]`` to ``last_s[i]`` (one token per engine step; the steps
    of one request are taken as equally long), a bounded number at a time."""
    start = 0
    n = len(tokens)
    while start < n:
        total = 0
        stop = start
        while stop < n and (total == 0 or total + tokens[stop] <= chunk):
            total += int(tokens[stop])
            stop += 1
        t = tokens[start:stop]
        idx = np.arange(int(t.sum())) - np.repeat(np.cumsum(t) - t, t)
        gap = np.where(t > 1, (last_s[start:stop] - first_s[start:stop]) / np.maximum(t - 1, 1), 0)
        yield np.repeat(first_s[start:stop], t) + idx * np.repeat(gap, t)
        start = stop


def peak_per_second(
    start_s: np.ndarray, first_s: np.ndarray, finish_s: np.ndarray, tokens: np.ndarray
) -> tuple[float, int]:
    """vLLM's ``max_output_tokens_per_s`` and ``max_concurrent_requests``: output
    tokens and requests in flight counted in one-second buckets from the first start
    (``calculate_metrics`` in ``vllm/benchmarks/serve.py``); (0.0, 0) when empty."""
    if start_s.size == 0:
        return 0.0, 0
    t0 = float(start_s.min())
    buckets = int(np.ceil(float(finish_s.max()) - t0)) + 1
    per_second = np.zeros(buckets, dtype=np.int64)
    for times in token_times_chunks(first_s, finish_s, tokens):
        b = (times - t0).astype(np.int64)
        b = b[(b >= 0) & (b < buckets)]
        per_second += np.bincount(b, minlength=buckets)
    delta = np.zeros(buckets + 1, dtype=np.int64)
    np.add.at(delta, (start_s - t0).astype(np.int64), 1)
    np.add.at(delta, (finish_s - t0).astype(np.int64) + 1, -1)
    concurrent = np.cumsum(delta)[:buckets]
    return float(per_second.max()), int(concurrent.max())
