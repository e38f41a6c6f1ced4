"""The run summary (``summary.json``) from the step and request records."""

from __future__ import annotations

from typing import Any

import numpy as np

from calibrate.frontend import FrontendModel
from sim.records.client_side import client_summary
from sim.records.goodput import good_requests
from sim.records.recorders import StepRecorder
from sim.records.request_recorder import RequestRecorder
from sim.records.window import MIN_BATCHES, distribution, find_window, min_batch_for, rate, trend


def _dist(values) -> dict[str, float]:
    """``{mean, p50, p90, p99}`` of a sample (seconds; NaN entries skipped); zeros when
    empty."""
    a = _array(values)
    a = a[~np.isnan(a)]
    if a.size == 0:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0}
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def build_summary(
    steps: StepRecorder,
    requests: RequestRecorder,
    *,
    num_requests: int,
    num_rejected: int,
    sim_duration_s: float,
    wall_s: float,
    num_gpu_blocks: int,
    block_size: int,
    input_limits: dict[str, Any] | None = None,
    goodput: dict[str, float] | None = None,
    frontend: FrontendModel | None = None,
    timeouts: bool = False,
) -> dict[str, Any]:
    """Everything INTERFACES.md lists for ``summary.json``, plus ``num_rejected`` and
    the ``input_limits`` fields after it (``rejected``, ``num_capped_outputs``,
    ``capped_outputs``: :mod:`sim.engine.input_limits`). ``goodput``: per-request SLOs in ms
    (:mod:`sim.records.goodput`); the window then reports ``goodput_rps``. ``frontend``: the
    API server's costs, for the ``client`` block (client-side latencies,
    :mod:`sim.records.client_side`); the top-level latencies are engine-side. ``timeouts``: the
    workload aborts requests at a client timeout; ``num_aborted`` (requests aborted,
    counted in ``num_requests``, not in ``num_finished`` nor in any latency) and
    ``timeouts`` (``num_aborted``, ``before_first_token``, ``file``) follow
    ``num_rejected``.

    ``kv_usage.mean`` is weighted by step duration (the fraction of time-averaged
    blocks in use); p99 and max are over steps.
    """
    kv = _kv_stats(_array(steps.kv_usage), _array(steps.duration_s))
    finished = requests.num_finished
    e2e = (
        np.frombuffer(requests.finish_s) - np.frombuffer(requests.arrival_s)
        if finished
        else np.zeros(0)
    )
    duration = sim_duration_s if sim_duration_s > 0 else 0.0
    return {
        "num_requests": num_requests,
        "num_finished": finished,
        "num_rejected": num_rejected,
        **(_timeouts(requests) if timeouts else {}),
        **(input_limits or {}),
        "sim_duration_s": duration,
        "wall_s": wall_s,
        "throughput_rps": finished / duration if duration else 0.0,
        "output_tokens_per_s": requests.output_tokens / duration if duration else 0.0,
        "ttft_s": _dist(requests.ttft_s),
        "tpot_s": _dist(requests.tpot_s),
        "e2e_s": _dist(e2e),
        "num_preemptions": requests.num_preemptions,
        "preemptions_per_request": requests.num_preemptions / finished if finished else 0.0,
        "prefix_cache_hit_rate": (
            steps.prefix_hits / steps.prefix_queries if steps.prefix_queries else 0.0
        ),
        "kv_usage": kv,
        "num_gpu_blocks": num_gpu_blocks,
        "block_size": block_size,
        "num_steps": steps.num_steps,
        "window": window_summary(steps, requests, goodput),
        **({"client": client_summary(requests, frontend, _dist)} if frontend else {}),
    }


def _timeouts(requests: RequestRecorder) -> dict[str, Any]:
    """``num_aborted`` and the ``timeouts`` block of a workload with client timeouts."""
    n = requests.num_aborted
    return {
        "num_aborted": n,
        "timeouts": {
            "num_aborted": n,
            "before_first_token": requests.num_aborted_before_first_token,
            "file": "aborted.csv" if n else None,
        },
    }


def _array(values, dtype: type = np.float64) -> np.ndarray:
    return np.frombuffer(values, dtype=dtype) if len(values) else np.zeros(0, dtype=dtype)


def window_summary(
    steps: StepRecorder, requests: RequestRecorder, goodput: dict[str, float] | None = None
) -> dict[str, Any]:
    """The steady-state figures of the run's measurement window (:mod:`sim.records.window`):
    latencies, throughput, output tokens/s, preemptions and KV usage, with 95%
    confidence intervals where the window is long enough, and its warnings. With
    ``goodput`` SLOs (ms, vLLM's keys), ``goodput_rps``: finishes in the window of
    requests meeting them, per second, with ``slo_ms`` and ``good_fraction`` (of the
    window's requests)."""
    arrival = _array(requests.arrival_s)
    finish = _array(requests.finish_s)
    ttft = _array(requests.ttft_s)
    tpot = _array(requests.tpot_s)
    win = find_window(arrival, finish, ttft, tpot)
    order = np.argsort(arrival[win.mask], kind="stable")  # arrival order, for batches
    span = win.end_s - win.start_s
    done = (finish >= win.start_s) & (finish <= win.end_s)
    output = _array(requests.output_len, np.int64)
    preempted = _array(requests.preempted, np.int64)
    n = int(win.mask.sum())
    doc: dict[str, Any] = {
        "method": "MSER-5 warm-up cut on TTFT, TPOT and number in system; ends at the "
        "last arrival; 95% intervals from batch means",
        "start_s": win.start_s,
        "end_s": win.end_s,
        "duration_s": span,
        "warmup_requests": win.warmup_requests,
        "num_requests": n,
        "offered_rps": rate(arrival, win.start_s, win.end_s)["value"],
        "throughput_rps": rate(finish, win.start_s, win.end_s),
        "output_tokens_per_s": float(output[done].sum()) / span if span > 0 else 0.0,
        "ttft_s": distribution(ttft[win.mask][order]),
        "tpot_s": distribution(tpot[win.mask][order]),
        "e2e_s": distribution((finish - arrival)[win.mask][order]),
        "preemptions_per_request": float(preempted[win.mask].sum()) / n if n else 0.0,
        "kv_usage": _window_kv(steps, win.start_s, win.end_s),
        "in_system_trend": trend(arrival, finish, win.start_s, win.end_s),
    }
    if goodput:
        good = good_requests(goodput, ttft, tpot, finish - arrival)
        doc["goodput_rps"] = {
            **rate(finish[good], win.start_s, win.end_s),
            "slo_ms": dict(goodput),
            "good_fraction": float(good[win.mask].mean()) if n else 0.0,
        }
    warnings = []
    if win.no_steady_part:
        warnings.append(
            "no steady part found: latencies still trend at the end of the search "
            "(saturated, or the run is too short)"
        )
    if doc["ttft_s"]["ci95"]["mean"] is None:
        warnings.append(
            f"window too short for confidence intervals ({n} requests; at least "
            f"{MIN_BATCHES * 5} needed, {MIN_BATCHES * min_batch_for(99):,} for p99)"
        )
    elif doc["ttft_s"]["ci95"]["p99"] is None:
        warnings.append(
            f"window too short for a p99 interval ({n} requests; "
            f"{MIN_BATCHES * min_batch_for(99):,} needed)"
        )
    doc["warnings"] = warnings
    return doc


def _kv_stats(usage: np.ndarray, dur: np.ndarray) -> dict[str, float]:
    """``{mean, p99, max}`` of per-step KV usage (mean weighted by step duration, s);
    zeros without steps."""
    if usage.size == 0:
        return {"mean": 0.0, "p99": 0.0, "max": 0.0}
    mean = float(np.average(usage, weights=dur)) if dur.sum() > 0 else float(usage.mean())
    return {"mean": mean, "p99": float(np.percentile(usage, 99)), "max": float(usage.max())}


def _window_kv(steps: StepRecorder, start: float, end: float) -> dict[str, float]:
    """KV usage over the steps that start in ``[start, end]`` (see :func:`_kv_stats`).

    When the steps are in start order (checked; a one-replica run writes them so), the
    window is a slice: views, not copies of the window's steps (8 bytes per step each,
    ~120 MB apiece at a million chat requests)."""
    starts = _array(steps.start_s)
    usage, duration = _array(steps.kv_usage), _array(steps.duration_s)
    if _in_order(starts):
        lo = int(np.searchsorted(starts, start, side="left"))
        hi = int(np.searchsorted(starts, end, side="right"))
        return _kv_stats(usage[lo:hi], duration[lo:hi])
    inside = (starts >= start) & (starts <= end)
    return _kv_stats(usage[inside], duration[inside])


def _in_order(values: np.ndarray) -> bool:
    """Whether ``values`` never decrease (a temporary of one byte per value)."""
    return bool((values[1:] >= values[:-1]).all())
