"""Samplers for token-length distributions, built from the spec models.

Every draw takes the caller's ``numpy.random.Generator``; samplers hold no state of
their own, so the same generator state gives the same lengths.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from workloads.errors import WorkloadError
from workloads.spec_lengths import (
    EmpiricalLength,
    FixedLength,
    LengthModel,
    LogNormalLength,
    NormalLength,
    UniformLength,
)

DrawMany = Callable[[np.random.Generator, int], np.ndarray]
RealFn = Callable[[float], float]


def _phi(z: float) -> float:
    """Standard normal CDF."""
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


class LengthSampler:
    """Draws integer lengths >= 1 (tokens) from one distribution."""

    def __init__(self, draw_many: DrawMany, mean: float) -> None:
        self._draw_many = draw_many
        self._mean = mean

    def draw(self, rng: np.random.Generator) -> int:
        """One length in tokens."""
        return int(self._draw_many(rng, 1)[0])

    def draw_many(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lengths in tokens (int64 array)."""
        return self._draw_many(rng, n)

    def mean(self) -> float:
        """Expected length in tokens (for normal and lognormal: of the clipped continuous
        variable; rounding to integers moves it by less than 0.5 token)."""
        return self._mean


def _clipped_mean(cdf: RealFn, partial: RealFn, lo: float, hi: float | None) -> float:
    """E[clip(X, lo, hi)] from the CDF and the partial expectation E[X; X > t]."""
    upper = 0.0 if hi is None else partial(hi) - hi * (1.0 - cdf(hi))
    return lo * cdf(lo) + partial(lo) - upper


def _rounded(values: np.ndarray, hi: int | None) -> np.ndarray:
    out = np.rint(values)
    out = np.clip(out, 1, hi if hi is not None else np.inf)
    return out.astype(np.int64)


def _normal(dist: NormalLength) -> LengthSampler:
    m, s, hi = dist.mean, dist.std, dist.max
    if s == 0:
        mean = float(min(max(round(m), 1), hi or math.inf))
    else:

        def cdf(t: float) -> float:
            return _phi((t - m) / s)

        def partial(t: float) -> float:
            z = (t - m) / s
            return m * (1 - _phi(z)) + s * math.exp(-z * z / 2) / math.sqrt(2 * math.pi)

        mean = _clipped_mean(cdf, partial, 1.0, hi)
    return LengthSampler(lambda rng, n: _rounded(rng.normal(m, s, n), hi), mean)


def _lognormal(dist: LogNormalLength) -> LengthSampler:
    mu, sigma = dist.mu_sigma()
    hi = dist.max

    def cdf(t: float) -> float:
        return _phi((math.log(t) - mu) / sigma)

    def partial(t: float) -> float:
        return math.exp(mu + sigma**2 / 2) * _phi((mu + sigma**2 - math.log(t)) / sigma)

    mean = _clipped_mean(cdf, partial, 1.0, hi)
    return LengthSampler(lambda rng, n: _rounded(rng.lognormal(mu, sigma, n), hi), mean)


def read_lengths_file(path: Path, file: str, field: str) -> np.ndarray:
    """Read one positive integer per line; ``#`` lines and blank lines are skipped."""
    try:
        text = path.read_text()
    except OSError as exc:
        reason = f"cannot read lengths file {str(path)!r}: {exc.strerror}"
        raise WorkloadError(file, field, reason) from None
    values: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            value = int(line)
        except ValueError:
            value = 0
        if value < 1:
            raise WorkloadError(
                file, field, f"{path.name} line {number}: {line!r} is not a positive integer"
            )
        values.append(value)
    if not values:
        raise WorkloadError(file, field, f"lengths file {path.name} holds no lengths")
    return np.asarray(values, dtype=np.int64)


def make_sampler(dist: LengthModel, base_dir: Path, file: str, field: str) -> LengthSampler:
    """Build the sampler for one ``LengthDist``.

    Args:
        dist: a length-distribution model from ``workloads.spec_lengths``.
        base_dir: directory that ``empirical`` paths are relative to (the YAML's).
        file, field: where the distribution came from, for error messages.
    """
    if isinstance(dist, FixedLength):
        value = dist.value
        return LengthSampler(lambda rng, n: np.full(n, value, dtype=np.int64), float(value))
    if isinstance(dist, UniformLength):
        lo, hi = dist.min, dist.max
        return LengthSampler(lambda rng, n: rng.integers(lo, hi + 1, n), (lo + hi) / 2)
    if isinstance(dist, NormalLength):
        return _normal(dist)
    if isinstance(dist, LogNormalLength):
        return _lognormal(dist)
    if isinstance(dist, EmpiricalLength):
        values = read_lengths_file(base_dir / dist.path, file, f"{field}.path")
        return LengthSampler(lambda rng, n: values[rng.integers(0, len(values), n)], values.mean())
    raise TypeError(f"not a length distribution: {dist!r}")
