"""One probe run judged against the SLOs: its measurement-window figures
(:func:`slo_figures`), its verdict, and for a run still undecided at the length limit
the margin each SLO must clear (:func:`drift_failures`).

A seed passes when its run is steady (see ``sim.records.verdict``) and meets every
SLO. The SLO metrics are the run's measurement-window figures (``summary["window"]``:
warm-up cut by MSER-5, the drain after the last arrival left out), each with its 95%
interval where the window is long enough. A saturated run's latencies are not
recorded as metrics (they depend only on how long the run was).
"""

from __future__ import annotations

import math
from typing import Any

from sim.records.verdict import UNDECIDED, VerdictThresholds

METRIC_SOURCE = {
    "ttft_mean_s": ("ttft_s", "mean"),
    "ttft_p90_s": ("ttft_s", "p90"),
    "tpot_mean_s": ("tpot_s", "mean"),
    "tpot_p99_s": ("tpot_s", "p99"),
    "e2e_p99_s": ("e2e_s", "p99"),
}
"""Each latency SLO's distribution in ``summary.json`` and the statistic it bounds."""


def slo_figures(
    summary: dict[str, Any],
) -> tuple[str, dict[str, float], dict[str, list[float] | None]]:
    """``(figures, values, intervals)`` of one run's SLO metrics.

    ``figures`` is ``"window"`` when the summary has a measurement window
    (``summary["window"]``, :mod:`sim.records.window`: warm-up cut, drain excluded), else
    ``"whole_run"`` (an older summary). ``values`` are seconds (preemptions: per
    request); ``intervals`` the window's 95% interval ``[lo, hi]`` of each metric,
    ``None`` where the window is too short for one, for whole-run figures and for
    preemptions (which have none).
    """
    window = summary.get("window")
    source = window if isinstance(window, dict) else summary
    values: dict[str, float] = {}
    intervals: dict[str, list[float] | None] = {}
    for key, (dist, stat) in METRIC_SOURCE.items():
        values[key] = source[dist][stat]
        ci = source[dist].get("ci95") if source is window else None
        intervals[key] = ci.get(stat) if isinstance(ci, dict) else None
    values["max_preemptions_per_request"] = source["preemptions_per_request"]
    intervals["max_preemptions_per_request"] = None
    return ("window" if source is window else "whole_run"), values, intervals


def window_sojourns(window: Any) -> float | None:
    """How many mean sojourn times a measurement window spans: its duration over its
    mean E2E latency (None without a window or a finite mean)."""
    if not isinstance(window, dict):
        return None
    mean_e2e = window.get("e2e_s", {}).get("mean")
    duration = window.get("duration_s")
    if not mean_e2e or not duration or not math.isfinite(mean_e2e) or mean_e2e <= 0:
        return None
    return float(duration) / float(mean_e2e)


_CLEAR_RISE_T = VerdictThresholds().rise_t_to_saturate


def _rise_t(summary: dict[str, Any]) -> float:
    """The t statistic of the window's rise in the number in system (0 without one)."""
    window = summary.get("window")
    trend = window.get("in_system_trend") if isinstance(window, dict) else None
    if not isinstance(trend, dict) or not trend.get("rising"):
        return 0.0
    return float(trend.get("t", 0.0))


def drift_failures(
    values: dict[str, float],
    intervals: dict[str, list[float] | None],
    bounds: dict[str, float],
    margin: float,
) -> list[str]:
    """The SLOs an undecided run at the length limit does not clear by ``margin``: the
    upper end of a metric's 95% interval (its value where it has none) must be at most
    ``(1 - margin) * bound``; preemptions per request, at most the bound."""
    failures = []
    for key, bound in bounds.items():
        ci = intervals.get(key)
        high = ci[1] if ci is not None else values[key]
        limit = bound if key == "max_preemptions_per_request" else (1.0 - margin) * bound
        if not math.isfinite(high) or high > limit:
            failures.append(f"{key} {high:.4g} > {limit:.4g} (drifting: margin {margin:.0%})")
    return failures


def judge_summary(
    summary: dict[str, Any], bounds: dict[str, float], drift_margin: float | None = None
) -> dict[str, Any]:
    """``{passed, state, reasons, failures, figures, metrics, intervals, ...}`` of one
    run against the SLOs.

    A saturated run fails, and so does an ``undecided`` one (the number in system still
    rises, not significantly enough to call it saturated): a plan runs it longer
    (:mod:`sim.plan.length`). At the longest run the plan allows (``drift_margin``
    given), an undecided run whose rise is not clear (t below
    :attr:`sim.records.verdict.VerdictThresholds.rise_t_to_saturate`) is judged on its SLOs, but
    each must clear its bound by ``drift_margin`` (:func:`drift_failures`), since a
    slow drift can still carry the metric over it. Both happen: a seed's arrivals are
    the same draws at every rate (scaled), so a stretch where they bunch reads as a
    rise at every rate, far below capacity (the plan example's seed 1 at 20-35 req/s,
    latencies half their bounds); and near capacity a seed undecided at 16,000 requests
    (chat preset at 38 req/s, TPOT p99 46 ms [44, 49] against 50) measured 53 ms at
    20,000 and 57 ms at 320,000.

    The SLO metrics are the measurement window's (:func:`slo_figures`); ``intervals``
    holds the 95% interval of each SLO given (``None`` when there is none);
    ``window_warnings`` the window's own warnings (e.g. too short for a p99 interval).
    The verdict (steady, undecided or saturated) is the whole run's.
    """
    verdict = summary["verdict"]
    figures, values, intervals = slo_figures(summary)
    failures = [
        f"{k} {values[k]:.4g} > {bound:.4g}"
        for k, bound in bounds.items()
        if not math.isfinite(values[k]) or values[k] > bound
    ]
    drifting = (
        drift_margin is not None
        and verdict["state"] == UNDECIDED
        and _rise_t(summary) < _CLEAR_RISE_T
    )
    saturated = verdict["state"] != "steady" and not drifting  # or not shown to be steady
    if saturated:
        failures = [f"{verdict['state']}: " + "; ".join(verdict["reasons"])]
    elif drifting and not failures:
        failures = drift_failures(values, intervals, bounds, float(drift_margin or 0.0))
    window = summary.get("window")
    return {
        "passed": not failures,
        "drifting": drifting,
        "sojourns": window_sojourns(window),
        "state": verdict["state"],
        "reasons": verdict["reasons"],
        "failures": failures,
        "figures": figures,
        "metrics": None if saturated else values,
        "intervals": None if saturated else {k: intervals[k] for k in bounds},
        "window_warnings": list(window.get("warnings", [])) if isinstance(window, dict) else [],
        "throughput_rps": summary["throughput_rps"],
    }
