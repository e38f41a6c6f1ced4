"""A kvsim run as the JSON ``vllm bench serve --save-result`` writes (vLLM 0.33.0).

The keys, their order and their units are vLLM's (:mod:`sim.interop.vllm_fields`):
times in the statistics in milliseconds, ``duration`` and ``latencies`` in seconds,
throughputs per second of ``duration``. As if run with ``--percentile-metrics
ttft,tpot,itl,e2el`` and ``--metric-percentiles`` as given (vLLM's default: 99), without
``--save-detailed``. One key is kvsim's own, as ``--metadata`` adds them:
``kvsim_version``.

Filled from the run (exact): ``num_prompts``, ``duration`` (t = 0 to the last finish),
``completed``, ``failed`` (prompts rejected for ``max_model_len``, which vLLM's server
answers with an error), token totals and throughputs, ``request_goodput`` (when the
run had goodput SLOs), TTFT / TPOT / E2EL statistics (vLLM's definitions: TPOT over
requests with more than one output token), ``latencies``, ``queue_times`` (zeros: an
open-loop client never waits on a concurrency limit), ``mean_itl_ms``.

Approximated: kvsim emits one token per engine step, so a request's inter-token
latencies are its decode steps; ``requests.csv`` keeps only the first and the last
token's time, so the ITLs of a request with n tokens are taken as n - 1 equal gaps of
its TPOT. ``mean_itl_ms`` is exact (total decode time over decode tokens); the ITL
median, std and percentiles, and ``max_output_tokens_per_s`` (tokens counted per
second), are computed from those equal gaps.

Not filled: ``date`` (a simulation has no wall-clock date; null keeps exports of the
same run byte-identical), ``label``/``backend``/``endpoint_type`` say ``kvsim``, ``rtfx``
is 0 (no audio), and the ``--save-detailed`` lists are left out; of them
``generated_texts`` cannot be filled at all (kvsim generates no text, and output
lengths are token counts, never re-tokenized).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.interop.run_dir import RunData
from sim.interop.stats import peak_per_second, repeated_mean_std, repeated_percentiles
from sim.interop.vllm_fields import (
    DEFAULT_METRIC_PERCENTILES,
    DETAILED_FIELDS,
    GENERATION_METRICS,
    RESULT_FIELDS,
    SETUP_FIELDS,
    percentile_word,
)
from sim.records.goodput import good_requests

BACKEND = "kvsim"
"""What ``backend``, ``endpoint_type`` and ``label`` say in an export."""


def _stats(values_s: np.ndarray, counts: np.ndarray | None, percentiles) -> dict[str, float]:
    """mean, median, std and percentiles in ms, as vLLM computes them (zeros if empty)."""
    if counts is None:
        counts = np.ones(values_s.shape, dtype=np.int64)
    mean, std = repeated_mean_std(values_s, counts)
    median, *ps = repeated_percentiles(values_s, counts, [50.0, *percentiles])
    out = {"mean": mean * 1e3, "median": median * 1e3, "std": std * 1e3}
    for p, v in zip(percentiles, ps, strict=True):
        out[f"p{percentile_word(p)}"] = v * 1e3
    return out


def _traffic(config: dict[str, Any]) -> tuple[Any, float]:
    """``request_rate`` and ``burstiness`` as vLLM records them: the arrival rate
    (``"inf"`` for a burst or a trace, as vLLM's default), and the gamma shape (1.0 for
    Poisson and the rest, vLLM's default)."""
    arrival = (config.get("workload") or {}).get("arrival") or {}
    rate = arrival.get("rate")
    kind = arrival.get("type")
    request_rate: Any = float(rate) if kind in ("poisson", "gamma", "constant") and rate else "inf"
    burstiness = float(arrival["burstiness"]) if kind == "gamma" else 1.0
    return request_rate, burstiness


def build_vllm_bench(
    run: RunData, percentiles: tuple[float, ...] = DEFAULT_METRIC_PERCENTILES
) -> dict[str, Any]:
    """The result JSON of ``vllm bench serve --save-result`` for ``run`` (see the
    module docstring for what is exact, approximated and left out)."""
    config = run.config
    setup = _setup(run)
    tpot_all = np.where(
        run.output_tokens > 1,
        (run.finish_s - run.first_token_s) / np.maximum(run.output_tokens - 1, 1),
        np.nan,
    )
    result = _result(run, tpot_all)
    many = run.output_tokens > 1
    samples = {
        "ttft": (run.ttft_s, None),
        "tpot": (tpot_all[many], None),
        "itl": (tpot_all[many], run.output_tokens[many] - 1),
        "e2el": (run.e2e_s, None),
    }
    metrics: dict[str, Any] = {}
    for name in GENERATION_METRICS:
        values, counts = samples[name]
        for stat, value in _stats(values, counts, percentiles).items():
            metrics[f"{stat}_{name}_ms"] = value
    ordered = {k: result[k] for k in RESULT_FIELDS if k in result and k not in DETAILED_FIELDS}
    assert tuple(setup) == SETUP_FIELDS
    kvsim_version = str(config.get("kvsim_version", ""))
    return {**setup, **ordered, **metrics, "kvsim_version": kvsim_version}


def _setup(run: RunData) -> dict[str, Any]:
    """The keys ``vllm bench serve`` records before its results: the client's
    settings, as a kvsim run would have given them."""
    summary, config = run.summary, run.config
    model = str(config.get("model", ""))
    request_rate, burstiness = _traffic(config)
    return {
        "date": None,
        "endpoint_type": BACKEND,
        "backend": BACKEND,
        "label": BACKEND,
        "model_id": model,
        "tokenizer_id": model,
        "num_prompts": int(summary.get("num_requests", run.num_finished)),
        "request_rate": request_rate,
        "burstiness": burstiness,
        "max_concurrency": None,
    }


def _result(run: RunData, tpot_all: np.ndarray) -> dict[str, Any]:
    """The benchmark's totals and throughputs (per second of ``duration``, s), goodput
    (with the run's goodput SLOs), latencies (s) and peaks; ``tpot_all``: each
    request's TPOT in seconds (NaN with one output token)."""
    summary, config = run.summary, run.config
    duration = float(summary.get("sim_duration_s", 0.0))
    completed = run.num_finished
    total_in = int(run.prompt_tokens.sum())
    total_out = int(run.output_tokens.sum())
    slo = config.get("goodput_slo_ms")
    goodput = None
    if slo and duration:
        good = good_requests(slo, run.ttft_s, tpot_all, run.e2e_s)
        goodput = int(good.sum()) / duration
    peak_tokens, peak_requests = peak_per_second(
        run.arrival_s, run.first_token_s, run.finish_s, run.output_tokens
    )

    def per_s(x: float) -> float:
        return x / duration if duration else 0.0

    return {
        "duration": duration,
        "completed": completed,
        "failed": int(summary.get("num_rejected", 0)),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(completed),
        "request_goodput": goodput,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
        "latencies": run.e2e_s.tolist(),
        "queue_times": [0.0] * completed,
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_requests,
        "rtfx": 0.0,
    }
