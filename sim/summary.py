"""The run summary (``summary.json``) from the step and request records."""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.records import RequestRecorder, StepRecorder


def _dist(values) -> dict[str, float]:
    """``{mean, p50, p90, p99}`` of a sample (seconds); zeros when empty."""
    a = np.frombuffer(values, dtype=np.float64) if len(values) else np.zeros(0)
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
) -> dict[str, Any]:
    """Everything INTERFACES.md lists for ``summary.json``, plus ``num_rejected`` and
    the ``input_limits`` fields after it (``rejected``, ``num_capped_outputs``,
    ``capped_outputs``: :mod:`sim.input_limits`).

    ``kv_usage.mean`` is weighted by step duration (the fraction of time-averaged
    blocks in use); p99 and max are over steps.
    """
    usage = np.frombuffer(steps.kv_usage, dtype=np.float64) if len(steps.kv_usage) else np.zeros(0)
    dur = (
        np.frombuffer(steps.duration_s, dtype=np.float64) if len(steps.duration_s) else np.zeros(0)
    )
    if usage.size:
        mean_usage = float(np.average(usage, weights=dur)) if dur.sum() > 0 else float(usage.mean())
        kv = {"mean": mean_usage, "p99": float(np.percentile(usage, 99)), "max": float(usage.max())}
    else:
        kv = {"mean": 0.0, "p99": 0.0, "max": 0.0}
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
    }
