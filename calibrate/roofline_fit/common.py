"""Shared pieces of the fits: relative least squares, holdout split, error summary."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "vidur_a100"
"""The Vidur excerpts (CSV; times in milliseconds)."""

A100_BF16_FLOPS = 312e12
"""A100's dense BF16 tensor-core peak, FLOP/s (the catalog's A100-80GB)."""
A100_HBM_BYTES_PER_S = 2039e9
"""A100-80GB's HBM bandwidth, bytes/s (the catalog's A100-80GB)."""


@dataclass(frozen=True)
class Errors:
    """Relative errors ``|predicted / measured - 1|`` of one regime: how many points,
    median, 90th percentile."""

    n: int
    median: float
    p90: float

    @classmethod
    def of(cls, predicted: np.ndarray, measured: np.ndarray) -> Errors:
        err = np.abs(np.asarray(predicted) / np.asarray(measured) - 1.0)
        if not err.size:
            return cls(0, float("nan"), float("nan"))
        return cls(int(err.size), float(np.median(err)), float(np.percentile(err, 90)))


def holdout_mask(sizes: np.ndarray, every: int = 3) -> np.ndarray:
    """True for points held out of a fit: every ``every``-th distinct size (sorted),
    starting at the second, so held-out sizes lie between fitted ones."""
    values = np.unique(sizes)
    held = set(values[1::every].tolist())
    return np.array([s in held for s in np.asarray(sizes).tolist()])


def relative_lstsq(x: np.ndarray, y: np.ndarray, robust: bool = True) -> np.ndarray:
    """``theta`` minimising the relative errors ``(x @ theta) / y - 1``: squared, or
    with ``robust`` their absolute values (iteratively reweighted least squares, 50
    rounds), which follows the median of noisy repeated sizes rather than outliers."""
    y = np.asarray(y, dtype=np.float64)
    a = x / y[:, None]
    weights = np.ones_like(y)
    theta = np.zeros(x.shape[1])
    for _ in range(50 if robust else 1):
        s = np.sqrt(weights)
        theta, *_ = np.linalg.lstsq(a * s[:, None], s, rcond=None)
        weights = 1.0 / np.maximum(np.abs(a @ theta - 1.0), 1e-3)
    return theta
