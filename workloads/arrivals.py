"""Open-loop arrival times.

Every open-loop process is drawn the same way: gaps with mean 1 in "operational time"
(exponential for Poisson, Gamma(b, 1/b) for burstiness b, all ones for a constant
rate, zeros for a burst), summed from 0, and mapped to seconds through the inverse of
the cumulative rate ``Lambda(t) = integral of rate``. For a fixed rate r that is
``t = s / r``: Gamma gaps become Gamma(b, 1 / (r b)) seconds, exactly
``vllm bench serve --burstiness b --request-rate r``. The first request arrives at
operational time 0, i.e. at t = 0 (or where the rate first becomes positive).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from workloads.spec_arrivals import (
    BurstArrival,
    ConstantArrival,
    GammaArrival,
    OpenLoopArrival,
    PiecewiseArrival,
    PoissonArrival,
)

CHUNK = 1024
"""Gaps are drawn this many at a time (the draws do not depend on the chunking)."""


class RateSchedule:
    """A piecewise-constant rate (requests per second) and the inverse of its integral."""

    def __init__(self, segments: list[tuple[float, float]]) -> None:
        """``segments``: (until_s, rate) pairs, the last ``until_s`` may be ``inf``."""
        starts, rates, cum_start, cum_end = [], [], [], []
        start, cum = 0.0, 0.0
        for index, (until, rate) in enumerate(segments):
            end = math.inf if index == len(segments) - 1 else until
            if rate > 0:
                starts.append(start)
                rates.append(rate)
                cum_start.append(cum)
                cum_end.append(cum + rate * (end - start))
            cum += rate * (end - start) if rate > 0 else 0.0
            start = end
        self._starts = np.asarray(starts)
        self._rates = np.asarray(rates)
        self._cum_start = np.asarray(cum_start)
        self._cum_end = np.asarray(cum_end)

    def time_at(self, s: np.ndarray) -> np.ndarray:
        """Seconds at which the cumulative rate first exceeds operational time ``s``."""
        index = np.searchsorted(self._cum_end, s, side="right")
        return self._starts[index] + (s - self._cum_start[index]) / self._rates[index]


def _schedule(arrival: OpenLoopArrival) -> RateSchedule | None:
    if isinstance(arrival, PiecewiseArrival):
        return RateSchedule([(seg.until_s or math.inf, seg.rate) for seg in arrival.segments])
    return None


def _gaps(arrival: OpenLoopArrival, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` operational-time gaps with mean 1 (0 for a burst)."""
    if isinstance(arrival, PoissonArrival):
        return rng.exponential(1.0, n)
    if isinstance(arrival, GammaArrival | PiecewiseArrival):
        b = arrival.burstiness
        return rng.exponential(1.0, n) if b == 1.0 else rng.gamma(b, 1.0 / b, n)
    if isinstance(arrival, ConstantArrival):
        return np.ones(n)
    if isinstance(arrival, BurstArrival):
        return np.zeros(n)
    raise TypeError(f"not an open-loop arrival: {arrival!r}")


def arrival_times(arrival: OpenLoopArrival, rng: np.random.Generator) -> Iterator[float]:
    """Endless, non-decreasing arrival times in seconds for an open-loop spec."""
    schedule = _schedule(arrival)
    rate = getattr(arrival, "rate", None)
    s = 0.0
    first = True
    while True:
        gaps = _gaps(arrival, rng, CHUNK)
        if first:
            gaps[0] = 0.0
            first = False
        ops = s + np.cumsum(gaps)
        s = float(ops[-1])
        if schedule is not None:
            times = schedule.time_at(ops)
        elif rate is not None:
            times = ops / rate
        else:
            times = ops
        yield from times.tolist()
