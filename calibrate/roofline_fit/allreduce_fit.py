"""NCCL all-reduce: per-call latency and link efficiency per GPU count, fitted to
Vidur's A100 measurements (``all_reduce_pairwise_nvlink.csv``).

Vidur's node pairs its four A100s by NVLink bridges (``pairwise_nvlink``): two workers
all-reduce over one NVLink pair, four workers run a ring that crosses PCIe Gen4, so
the four-worker fit is a PCIe figure. Model, per call of ``S`` bytes on ``w`` GPUs:
``t = latency + 2 (w - 1) / w * S / (efficiency * link)`` (ring; ``link`` the nominal
one-direction bandwidth: 300 GB/s NVLink 3, 32 GB/s PCIe Gen4 x16), least squares on
relative error over the sizes kept, error reported on every third size held out.
Vidur times a bare ``torch.distributed`` call, outside CUDA graphs, so the latency
includes the launch and synchronisation a serving step also pays per call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from calibrate.roofline_fit.common import DATA, Errors, holdout_mask, relative_lstsq

LINKS = {2: ("nvlink", 300e9), 4: ("pcie", 32e9)}
"""Vidur's node: the link each worker count's ring is bound by, and its nominal
one-direction bandwidth (bytes/s)."""
MAX_BYTES = 64 << 20
"""Largest message fitted (bytes): a step's activations are at most a few tens of MB."""


@dataclass(frozen=True)
class NcclFit:
    """One GPU count's fit: seconds per call, fraction of the link, holdout errors."""

    workers: int
    link: str
    latency_s: float
    efficiency: float
    train: Errors
    holdout: Errors


def load() -> pd.DataFrame:
    """The excerpt: ``num_workers``, ``size_bytes``, ``all_reduce_ms``."""
    return pd.read_csv(DATA / "all_reduce_pairwise_nvlink.csv")


def predict(
    size: np.ndarray, workers: int, link_bytes_per_s: float, latency_s: float, efficiency: float
) -> np.ndarray:
    """Ring all-reduce seconds of ``size`` bytes (see the module docstring)."""
    return latency_s + 2.0 * (workers - 1) / workers * size / (efficiency * link_bytes_per_s)


def fit_nccl(data: pd.DataFrame | None = None) -> list[NcclFit]:
    """Fits for 2 and 4 workers (see the module docstring)."""
    data = load() if data is None else data
    out = []
    for workers, (link, bw) in LINKS.items():
        x = data[(data.num_workers == workers) & (data.size_bytes <= MAX_BYTES)]
        size = x.size_bytes.to_numpy(np.float64)
        y = x.all_reduce_ms.to_numpy(np.float64) * 1e-3
        held = holdout_mask(size)
        ring = 2.0 * (workers - 1) / workers * size / bw
        design = np.column_stack([np.ones_like(size), ring])
        lat, inv_eff = relative_lstsq(design[~held], y[~held])
        pred = design @ np.array([lat, inv_eff])
        out.append(
            NcclFit(
                workers,
                link,
                float(lat),
                float(1.0 / inv_eff),
                Errors.of(pred[~held], y[~held]),
                Errors.of(pred[held], y[held]),
            )
        )
    return out
