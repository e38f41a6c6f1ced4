"""Goodput: requests per second that meet per-request SLOs, as ``vllm bench serve``
counts them (its ``--goodput KEY:VALUE`` option).

A finished request is *good* when its TTFT, its TPOT (time per output token after
the first; a one-token request has none and meets any TPOT SLO, as vLLM counts it
as 0) and its E2E latency are each at most the SLO given for it. Keys and units are
vLLM's: ``ttft``, ``tpot``, ``e2el``, in milliseconds. kvsim reports goodput over the
run's measurement window (:mod:`sim.records.window`) with a batch-means 95% interval.
"""

from __future__ import annotations

import math

import numpy as np

GOODPUT_KEYS = ("ttft", "tpot", "e2el")
"""vLLM's goodput metric names: time to first token, time per output token, end-to-end
latency (all in milliseconds)."""


def parse_goodput(items: list[str] | None, field: str = "--goodput") -> dict[str, float] | None:
    """``["ttft:500", "tpot:50"]`` as ``{"ttft": 500.0, "tpot": 50.0}`` (ms); None when
    empty. ValueError naming ``field``, the allowed keys and the bad item."""
    if not items:
        return None
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = str(item).partition(":")
        key = key.strip()
        if not sep or key not in GOODPUT_KEYS:
            raise ValueError(
                f"{field}: {item!r} is not KEY:VALUE with KEY one of "
                f"{', '.join(GOODPUT_KEYS)} (milliseconds, as vllm bench serve)"
            )
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if not math.isfinite(ms) or ms <= 0:
            raise ValueError(f"{field}: {key} must be a positive number of ms (got {value!r})")
        if key in out:
            raise ValueError(f"{field}: {key} is given twice")
        out[key] = ms
    return out


def good_requests(
    slo_ms: dict[str, float], ttft_s: np.ndarray, tpot_s: np.ndarray, e2e_s: np.ndarray
) -> np.ndarray:
    """Boolean mask of the requests meeting every SLO in ``slo_ms`` (latencies in
    seconds, one entry per request; a NaN TPOT meets any TPOT SLO)."""
    good = np.ones(ttft_s.shape, dtype=bool)
    if "ttft" in slo_ms:
        good &= ttft_s <= slo_ms["ttft"] / 1e3
    if "tpot" in slo_ms:
        good &= np.isnan(tpot_s) | (tpot_s <= slo_ms["tpot"] / 1e3)
    if "e2el" in slo_ms:
        good &= e2e_s <= slo_ms["e2el"] / 1e3
    return good
