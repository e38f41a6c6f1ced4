"""What an autoscaled run cost and how well it served: GPU-hours, GPUs over time, SLO
attainment per window.

A replica is billed from when it was asked for until it stopped: the end of its last
routable stretch or its last request's finish, whichever is later (a replica drains what
it holds before it stops). The fixed cluster runs the peak number of replicas all the
time. Times in seconds; GPUs = replicas x tensor-parallel size.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from sim.autoscale.schedule import Schedule
from sim.records.slo import SLO


def billed_intervals(
    schedule: Schedule, requests: pd.DataFrame, end_s: float
) -> list[list[tuple[float, float]]]:
    """Per replica, the ``(from, to)`` seconds it was billed, stretch by stretch."""
    out = []
    for k, plan in enumerate(schedule.replicas):
        mine = requests[requests["replica"] == k]
        spans = []
        for ask, route in zip(plan.requested_s, plan.routable):
            stop = end_s if route.end_s is None else route.end_s
            held = mine[(mine["arrival_s"] >= route.start_s) & (mine["arrival_s"] < stop)]
            last = float(held["finish_s"].max()) if len(held) else stop
            spans.append((ask, max(stop, last) if route.end_s is not None else end_s))
        out.append(spans)
    return out


def gpu_seconds(spans: list[list[tuple[float, float]]], tp: int) -> float:
    return tp * sum(b - a for replica in spans for a, b in replica)


def peak_concurrent(spans: list[list[tuple[float, float]]]) -> int:
    """The most replicas billed at once."""
    events = sorted([(a, 1) for r in spans for a, _ in r] + [(b, -1) for r in spans for _, b in r])
    now = best = 0
    for _, d in events:
        now += d
        best = max(best, now)
    return best


def _latencies(requests: pd.DataFrame) -> pd.DataFrame:
    out = requests["output_tokens"]
    decode = requests["finish_s"] - requests["first_token_s"]
    return pd.DataFrame(
        {
            "ttft": requests["first_token_s"] - requests["arrival_s"],
            "tpot": (decode / (out - 1).clip(lower=1)).where(out > 1),
            "e2e": requests["finish_s"] - requests["arrival_s"],
            "preemptions": requests["num_preemptions"],
        }
    )


def slo_figures(requests: pd.DataFrame) -> dict[str, float]:
    """The figures SLOs bound, over ``requests`` (seconds; preemptions per request)."""
    lat = _latencies(requests)
    tpot = lat["tpot"].dropna()
    return {
        "ttft_mean_s": float(lat["ttft"].mean()),
        "ttft_p90_s": float(np.percentile(lat["ttft"], 90)),
        "tpot_mean_s": float(tpot.mean()) if len(tpot) else 0.0,
        "tpot_p99_s": float(np.percentile(tpot, 99)) if len(tpot) else 0.0,
        "e2e_p99_s": float(np.percentile(lat["e2e"], 99)),
        "max_preemptions_per_request": float(lat["preemptions"].mean()),
    }


def meets(figures: dict[str, float], slo: SLO | None) -> bool | None:
    """Whether every given bound holds (None without SLOs)."""
    if slo is None:
        return None
    return all(figures[k] <= bound for k, bound in slo.bounds().items())


def window_attainment(
    schedule: Schedule, requests: pd.DataFrame, slo: SLO | None
) -> list[dict[str, Any]]:
    """Per window: its requests' SLO figures and whether they meet the SLOs."""
    rows = []
    for w in schedule.windows:
        sel = requests[(requests["arrival_s"] >= w.start_s) & (requests["arrival_s"] < w.end_s)]
        figures = slo_figures(sel) if len(sel) else None
        rows.append(
            {
                "start_s": w.start_s,
                "num_requests": int(len(sel)),
                "figures": figures,
                "meets_slo": None if figures is None else meets(figures, slo),
            }
        )
    return rows
