"""Attention efficiency as a function of size, fitted to Vidur's A100 FlashAttention
kernel times (``attention_decode_tp2.csv``, ``attention_prefill_tp2.csv``: 64 query
and 8 KV heads of 128 at TP 2, i.e. 32 and 4 per rank, BF16 KV cache).

* decode, ``b`` requests reading ``K`` KV bytes in all: ``t = t0 + K / (e_d BW)``, a
  kernel floor and the cache streamed at ``e_d`` of HBM bandwidth (a term for few
  requests' lower parallelism, ``K / BW / b``, fitted negative: the floor covers it).
* prefill, one chunk of ``q`` tokens on ``c`` cached: ``t = t0 + (q c + kappa
  q (q + 1) / 2) * f / (e_p F)``, ``f`` the FLOPs of one query-key pair (``4 * heads
  * head_size``): the causal triangle of the chunk on itself costs ``kappa`` times
  a pair on the cache (partly masked tiles).

Least absolute relative error, linear in ``(t0, 1 / e)`` and ``(t0, 1 / e,
kappa / e)``; every third KV size (decode) or chunk size (prefill) held out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from calibrate.roofline_fit.common import (
    A100_BF16_FLOPS,
    A100_HBM_BYTES_PER_S,
    DATA,
    Errors,
    holdout_mask,
    relative_lstsq,
)

Q_HEADS, KV_HEADS, HEAD = 32, 4, 128
"""Per rank (TP 2 of 64 / 8 heads)."""
KV_BYTES_PER_TOKEN = 2 * KV_HEADS * HEAD * 2  # K and V, BF16
FLOPS_PER_PAIR = 4 * Q_HEADS * HEAD


@dataclass(frozen=True)
class DecodeFit:
    """``t0`` seconds, ``e_d`` of HBM."""

    floor_s: float
    efficiency: float
    train: Errors
    holdout: Errors


@dataclass(frozen=True)
class PrefillFit:
    """``t0`` seconds, ``e_p`` of the tensor-core peak, ``kappa``."""

    floor_s: float
    efficiency: float
    causal_weight: float
    train: Errors
    holdout: Errors


def fit_decode(path: str | None = None) -> DecodeFit:
    """The decode fit (module docstring)."""
    d = pd.read_csv(path or DATA / "attention_decode_tp2.csv")
    b = d.batch_size.to_numpy(np.float64)
    kv = b * d.kv_cache_size.to_numpy(np.float64) * KV_BYTES_PER_TOKEN
    y = d.decode_ms.to_numpy(np.float64) * 1e-3
    held = holdout_mask(d.kv_cache_size.to_numpy())
    t = kv / A100_HBM_BYTES_PER_S
    x = np.column_stack([np.ones_like(b), t])
    theta = relative_lstsq(x[~held], y[~held])
    pred = x @ theta
    return DecodeFit(
        float(theta[0]),
        float(1.0 / theta[1]),
        Errors.of(pred[~held], y[~held]),
        Errors.of(pred[held], y[held]),
    )


def fit_prefill(path: str | None = None) -> PrefillFit:
    """The prefill fit (module docstring)."""
    d = pd.read_csv(path or DATA / "attention_prefill_tp2.csv")
    q = d.prefill_chunk_size.to_numpy(np.float64)
    c = d.kv_cache_size.to_numpy(np.float64)
    y = d.prefill_ms.to_numpy(np.float64) * 1e-3
    held = holdout_mask(q)
    per = FLOPS_PER_PAIR / A100_BF16_FLOPS
    x = np.column_stack([np.ones_like(q), q * c * per, q * (q + 1.0) / 2.0 * per])
    theta = relative_lstsq(x[~held], y[~held])
    pred = x @ theta
    return PrefillFit(
        float(theta[0]),
        float(1.0 / theta[1]),
        float(theta[2] / theta[1]),
        Errors.of(pred[~held], y[~held]),
        Errors.of(pred[held], y[held]),
    )
