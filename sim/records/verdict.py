"""Verdicts: did a run reach a steady state, or is the configuration saturated?

Judged from the step and request records alone: during a run from the recorders'
running aggregates (:class:`~sim.records.verdict_inputs.VerdictInputs`), afterwards
from any run directory's ``steps.csv`` and ``requests.csv`` (:func:`judge_run_dir`).
The offered load is the arrival rate seen in ``requests.csv``; the *arrival window*
runs from the first to the last arrival. A run is **saturated** when any of these holds:

- ``queue``: the waiting queue (``num_waiting`` summed over replicas) grows over the
  second half of the arrival window: least-squares slope above
  ``queue_growth_frac`` x the arrival rate and growth of at least
  ``max(min_queue_growth, 5% of the requests)``;
- ``throughput``: in the second half of the arrival window, requests finish at less
  than ``throughput_frac`` of the rate at which they arrive (the backlog of
  requests in the system grows without bound);
- ``preemptions``: more than ``max_preemptions_per_request`` preemptions per
  finished request (a preemption storm);
- ``livelock``: a replica runs ``livelock_steps`` or more consecutive steps that
  decode no token while preempting requests (steps without progress);
- ``rising``: the number of requests in the system rises over the run's measurement
  window (:func:`sim.records.window.trend`: significantly, by more than 10% of its mean and by
  5 requests or more; the window from :func:`sim.records.window.find_window`), the warm-up
  cut found no steady part at all, the window lasts at least
  ``sojourns_to_judge_rise`` (10) mean sojourn times (shorter, a filling engine looks
  the same) and the rise is clear (its t statistic at least ``rise_t_to_saturate``,
  4.6, twice the 95% value).

When the number in system rises or no steady part was found, but not both over a
long enough window, the run is **undecided**: the engine is still filling or
saturates slowly, and only a longer run can tell (``kvsim plan`` runs such probes
longer). Otherwise it is **steady**. Runs with too few arrivals or an arrival window
of zero (a burst) cannot show queue growth; their verdict notes that.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.records.verdict_inputs import VerdictInputs
from sim.records.window import find_window, trend

if TYPE_CHECKING:  # pandas only for reading run directories back
    import pandas as pd

    from sim.records.recorders import StepRecorder
    from sim.records.request_recorder import RequestRecorder

STEADY = "steady"
UNDECIDED = "undecided"
SATURATED = "saturated"
_GRID = 64


@dataclass(frozen=True)
class VerdictThresholds:
    """Where "steady" ends; see the module docstring."""

    queue_growth_frac: float = 0.1
    min_queue_growth: int = 3
    throughput_frac: float = 0.75
    max_preemptions_per_request: float = 1.0
    livelock_steps: int = 100
    min_arrivals: int = 20
    sojourns_to_judge_rise: float = 10.0
    rise_t_to_saturate: float = 4.6


def _step_fn(times: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Value of the last record at or before each grid time (0 before the first)."""
    idx = np.searchsorted(times, grid, side="right") - 1
    out = np.where(idx >= 0, values[np.clip(idx, 0, None)], 0)
    return out.astype(np.float64)


def _slope(grid: np.ndarray, y: np.ndarray) -> float:
    """The least-squares slope of ``y`` over ``grid`` (0 for a single point)."""
    t = grid - grid.mean()
    denom = float((t * t).sum())
    return float((t * (y - y.mean())).sum() / denom) if denom > 0 else 0.0


def judge(
    steps: pd.DataFrame,
    requests: pd.DataFrame,
    thresholds: VerdictThresholds | None = None,
) -> dict[str, Any]:
    """The verdict from record tables (see :func:`judge_inputs`)."""
    return judge_inputs(VerdictInputs.from_frames(steps, requests), thresholds)


def judge_inputs(
    inputs: VerdictInputs, thresholds: VerdictThresholds | None = None
) -> dict[str, Any]:
    """``{state, reasons, notes, offered_rps, finish_rps_second_half}`` of one run."""
    th = thresholds or VerdictThresholds()
    n = inputs.arrivals.size
    reasons, notes, out = _arrival_window_reasons(inputs, th)
    finished = n
    preempt = inputs.num_preemptions / finished if finished else 0.0
    if preempt > th.max_preemptions_per_request:
        reasons.append(
            f"preemptions: {preempt:.3g} per request (storm above "
            f"{th.max_preemptions_per_request:g})"
        )
    stuck = inputs.longest_no_progress
    if stuck >= th.livelock_steps:
        reasons.append(f"livelock: {stuck} consecutive steps decode nothing while preempting")
    state = SATURATED if reasons else STEADY
    if state == STEADY and n >= th.min_arrivals:
        state = _rise_verdict(inputs, th, reasons)
    return {"state": state, "reasons": reasons, "notes": notes, **out}


def _arrival_window_reasons(
    inputs: VerdictInputs, th: VerdictThresholds
) -> tuple[list[str], list[str], dict[str, Any]]:
    """``(reasons, notes, rates)`` from the second half of the arrival window: the
    ``throughput`` and ``queue`` reasons, a note when the run is too short to judge,
    and ``offered_rps`` / ``finish_rps_second_half`` (req/s)."""
    reasons: list[str] = []
    notes: list[str] = []
    arrivals = np.sort(inputs.arrivals)
    finishes = np.sort(inputs.finishes)
    n = arrivals.size
    out: dict[str, Any] = {"offered_rps": 0.0, "finish_rps_second_half": 0.0}
    window = float(arrivals[-1] - arrivals[0]) if n else 0.0
    if n < th.min_arrivals or window <= 0:
        notes.append(
            f"{n} arrivals over {window:.3g} s: too few or too short to judge queue growth"
        )
        return reasons, notes, out
    rate = (n - 1) / window
    mid, end = arrivals[0] + window / 2, arrivals[-1]
    half = end - mid
    arrived = np.searchsorted(arrivals, end, "right") - np.searchsorted(arrivals, mid, "right")
    done = np.searchsorted(finishes, end, "right") - np.searchsorted(finishes, mid, "right")
    out["offered_rps"] = rate
    out["finish_rps_second_half"] = done / half
    if arrived > 0 and done < th.throughput_frac * arrived:
        reasons.append(
            f"throughput: {done / half:.3g} req/s finished in the second half of the "
            f"arrival window, below the offered {arrived / half:.3g} req/s"
        )
    grid = np.linspace(mid, end, _GRID)
    waiting = np.zeros(_GRID)
    for times, values in inputs.waiting:
        waiting += _step_fn(times, values, grid)
    slope = _slope(grid, waiting)
    growth = slope * half
    if slope > th.queue_growth_frac * rate and growth >= max(th.min_queue_growth, 0.05 * n):
        reasons.append(
            f"queue: the waiting queue grows by {slope:.3g} req/s over the second half "
            f"of the arrival window (to {waiting[-1]:.0f} waiting)"
        )
    return reasons, notes, out


def _rise_verdict(inputs: VerdictInputs, th: VerdictThresholds, reasons: list[str]) -> str:
    """The state of a run no other reason saturates, from the number in system over
    its measurement window: ``steady``, ``undecided`` or (a clear rise, no steady part,
    a long enough window) ``saturated``; the reason is appended to ``reasons``."""
    win = find_window(inputs.arrivals, inputs.finishes, inputs.ttft, inputs.tpot)
    rise = trend(inputs.arrivals, inputs.finishes, win.start_s, win.end_s)
    if not (rise["rising"] or win.no_steady_part):
        return STEADY
    sojourn = inputs.finishes[win.mask] - inputs.arrivals[win.mask]
    mean_sojourn = float(sojourn.mean()) if sojourn.size else 0.0
    span = win.end_s - win.start_s
    # A short run cannot tell an engine still filling from one saturating: only
    # a window many sojourn times long can.
    long_enough = span >= th.sojourns_to_judge_rise * mean_sojourn
    state = UNDECIDED
    how = "still filling or slowly saturating: run longer"
    clear = rise["t"] >= th.rise_t_to_saturate
    if rise["rising"] and clear and win.no_steady_part and long_enough:
        state = SATURATED
        how = (
            "with no steady part (the warm-up cut reached its limit) over "
            f"{span / mean_sojourn:.0f} mean sojourn times"
        )
    if rise["rising"]:
        reasons.append(
            f"rising: requests in the system rise by {rise['growth_frac']:.0%} of "
            f"their mean ({rise['mean_in_system']:.0f}) over the measurement window "
            f"(t = {rise['t']:.1f}), {how}"
        )
    else:
        reasons.append(
            "no steady part: the warm-up cut reached its limit (half the run); "
            "latencies or the number in system still trend: run longer"
        )
    return state


STEP_USECOLS = ["replica", "start_s", "num_waiting", "num_decode_tokens", "num_preempted"]
REQUEST_USECOLS = ["arrival_s", "first_token_s", "finish_s", "output_tokens", "num_preemptions"]


def read_records(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The columns verdicts need, from a run directory."""
    import pandas as pd

    steps = pd.read_csv(run_dir / "steps.csv", usecols=STEP_USECOLS)
    requests = pd.read_csv(run_dir / "requests.csv", usecols=REQUEST_USECOLS)
    return steps, requests


def judge_run_dir(run_dir: Path, thresholds: VerdictThresholds | None = None) -> dict[str, Any]:
    """The verdict of a finished run directory."""
    steps, requests = read_records(Path(run_dir))
    return judge(steps, requests, thresholds)


def replica_summaries_from_recorders(
    steps: StepRecorder, requests: RequestRecorder, num_replicas: int = 0
) -> list[dict[str, Any]]:
    """Per-replica ``{replica, num_finished, num_steps, num_preemptions,
    prefix_cache_hit_rate, kv_usage_mean, output_tokens}`` (``kv_usage_mean`` weighted
    by step duration) from the recorders of a run that just ended, one entry per
    replica: ids 0..num_replicas-1 and any other id in the records."""
    ids = sorted(set(range(num_replicas)) | set(steps.per_replica) | set(requests.per_replica))
    dur_all = np.frombuffer(steps.duration_s, dtype=np.float64) if steps.num_steps else None
    usage_all = np.frombuffer(steps.kv_usage, dtype=np.float64) if steps.num_steps else None
    several = steps.num_replicas > 1  # the replica of every step is kept
    replica_of = np.frombuffer(steps.replica, dtype=np.uint16) if several else None
    out = []
    for r in ids:
        rec = steps.per_replica.get(r)
        finished, preemptions, output_tokens = requests.per_replica.get(r, (0, 0, 0))
        mean = 0.0
        if rec is not None and rec.num_steps and dur_all is not None:
            if replica_of is None:
                dur, usage = dur_all, usage_all
            else:
                mask = replica_of == r
                dur, usage = dur_all[mask], usage_all[mask]
            mean = float(np.average(usage, weights=dur)) if dur.sum() > 0 else 0.0
        queries = rec.prefix_queries if rec is not None else 0
        out.append(
            {
                "replica": int(r),
                "num_finished": finished,
                "num_steps": rec.num_steps if rec is not None else 0,
                "num_preemptions": preemptions,
                "output_tokens": output_tokens,
                "prefix_cache_hit_rate": rec.prefix_hits / queries if queries else 0.0,
                "kv_usage_mean": mean,
            }
        )
    return out
