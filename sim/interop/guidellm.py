"""A kvsim run in the shape of GuideLLM's ``benchmarks.json`` (report schema version
2, GuideLLM 0.7: ``GenerativeBenchmarksReport``).

One benchmark: the whole run, no warm-up or cool-down cut (``measure_start_time`` is the
first arrival, ``measure_end_time`` the last finish). Times are seconds from the run's
start (t = 0), not Unix time. GuideLLM's definitions, which differ from vLLM's:
``time_per_output_token_ms`` is latency over *all* output tokens (first included),
``inter_token_latency_ms`` is vLLM's TPOT ((last - first token) / (n - 1)), weighted
by n - 1; ``request_latency`` is in seconds.

Filled: ``metadata`` (``version`` 2; GuideLLM's own version fields are null and
``kvsim_version`` is added), each benchmark's ``type_``, ``config`` (``id_``, ``run_id``,
``run_index``, ``strategy``), ``start_time``/``end_time``/``duration``, the timing fields
and ``requests_made`` of ``scheduler_metrics``, and in ``metrics``: ``request_totals``,
``requests_per_second``, ``request_concurrency``, ``request_latency``,
``request_streaming_iterations_count``, ``prompt_token_count``, ``output_token_count``,
``total_token_count``, ``time_to_first_token_ms``, ``time_to_first_output_token_ms`` (the
same: no reasoning tokens), ``time_per_output_token_ms``, ``inter_token_latency_ms``,
``prompt_tokens_per_second``, ``output_tokens_per_second``, ``tokens_per_second``,
``output_tokens_per_iteration`` and ``iter_tokens_per_iteration`` (1: one token per step).

Approximated: token rates need each token's time; kvsim keeps the first and the last,
so a request's tokens are spaced evenly between them (as GuideLLM itself does), and a
run of more than :data:`MAX_TOKEN_EVENTS` tokens is thinned to that many events of
equal weight per request.

Left out: the report's ``config`` (the GuideLLM scenario: a kvsim run has no target,
backend or data arguments; kvsim's model and workload are given instead),
``scheduler_state``, per-request ``requests``, the scheduler's internal delay averages,
and the ``text``/``image``/``video``/``audio``/``tool_call`` metrics (words and
characters need the generated text, which a simulation does not have). So GuideLLM's
``GenerativeBenchmarksReport.load_file`` does not load the file; ``kvsim compare``
reads it, and so does anything that reads those fields.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.interop.guidellm_stats import by_status, concurrency_summary, rate_summary, summary
from sim.interop.run_dir import RunData

REPORT_VERSION = 2
MAX_TOKEN_EVENTS = 2_000_000


def _strategy(config: dict[str, Any]) -> dict[str, Any]:
    """GuideLLM's scheduling strategy closest to the workload's arrivals."""
    arrival = (config.get("workload") or {}).get("arrival") or {}
    kind = arrival.get("type")
    if kind in ("poisson", "constant") and arrival.get("rate"):
        return {"type_": kind, "rate": float(arrival["rate"])}
    if kind == "burst":
        return {"type_": "throughput"}
    source = str((config.get("workload") or {}).get("source", ""))
    return {"type_": "trace" if source.startswith("trace") else "strategy", "kvsim_arrival": kind}


def _token_events(run: RunData) -> tuple[np.ndarray, np.ndarray]:
    """Output-token events ``(time, tokens)``: the first token at its time, the rest
    spaced evenly to the finish, at most :data:`MAX_TOKEN_EVENTS` in all."""
    n = run.output_tokens
    rest = np.maximum(n - 1, 0)
    per = rest
    total = int(rest.sum())
    if total + n.size > MAX_TOKEN_EVENTS:
        cap = max(1, (MAX_TOKEN_EVENTS - n.size) // max(n.size, 1))
        per = np.minimum(rest, cap)
    idx = np.arange(int(per.sum())) + 1 - np.repeat(np.cumsum(per) - per, per)
    gap = np.where(per > 0, (run.finish_s - run.first_token_s) / np.maximum(per, 1), 0.0)
    times = np.repeat(run.first_token_s, per) + idx * np.repeat(gap, per)
    weight = np.repeat(np.where(per > 0, rest / np.maximum(per, 1), 0.0), per)
    return (
        np.concatenate((run.first_token_s, times)),
        np.concatenate((np.minimum(n, 1).astype(np.float64), weight)),
    )


def build_guidellm(run: RunData) -> dict[str, Any]:
    """The ``benchmarks.json`` content for ``run`` (see the module docstring)."""
    cfg = run.config
    n_ok = run.num_finished
    start = float(run.arrival_s.min()) if n_ok else 0.0
    end = float(run.finish_s.max()) if n_ok else 0.0
    metrics = _metrics(run, start, end)
    benchmark = {
        "type_": "generative_benchmark",
        "config": {"id_": "kvsim", "run_id": "kvsim", "run_index": 0, "strategy": _strategy(cfg)},
        "scheduler_metrics": {
            "start_time": 0.0,
            "request_start_time": start,
            "measure_start_time": start,
            "measure_end_time": end,
            "request_end_time": end,
            "end_time": end,
            "requests_made": dict(metrics["request_totals"]),
        },
        "metrics": metrics,
        "start_time": start,
        "end_time": end,
        "duration": end - start,
        "warmup_duration": 0.0,
        "cooldown_duration": 0.0,
    }
    return {
        "metadata": {
            "version": REPORT_VERSION,
            "guidellm_version": None,
            "python_version": None,
            "platform": None,
            "kvsim_version": str(cfg.get("kvsim_version", "")),
        },
        "config": {
            "kvsim": {
                "model": cfg.get("model"),
                "gpu": cfg.get("gpu"),
                "workload": (cfg.get("workload") or {}).get("name"),
                "seed": cfg.get("seed"),
            }
        },
        "benchmarks": [benchmark],
    }


def _metrics(run: RunData, start: float, end: float) -> dict[str, Any]:
    """The benchmark's ``metrics``: request totals, rates (per second of the run from
    ``start`` to ``end``, seconds), concurrency, latencies (``request_latency`` in
    seconds, the rest in ms) and token counts, each by status."""
    n_ok = run.num_finished
    rejected = int(run.summary.get("num_rejected", 0))
    out_tok = run.output_tokens.astype(np.float64)
    in_tok = run.prompt_tokens.astype(np.float64)
    latency = run.e2e_s
    ttft_ms = run.ttft_s * 1e3
    many = run.output_tokens > 1
    itl_ms = np.where(
        many, (run.finish_s - run.first_token_s) / np.maximum(out_tok - 1, 1) * 1e3, 0.0
    )
    tpot_ms = np.where(out_tok > 0, latency / np.maximum(out_tok, 1) * 1e3, 0.0)
    tok_t, tok_w = _token_events(run)
    return {
        "request_totals": {
            "successful": n_ok,
            "incomplete": 0,
            "errored": rejected,
            "total": n_ok + rejected,
        },
        "requests_per_second": by_status(rate_summary(run.finish_s, np.ones(n_ok), start, end)),
        "request_concurrency": by_status(
            concurrency_summary(run.arrival_s, run.finish_s, start, end)
        ),
        "request_latency": by_status(summary(latency)),
        "request_streaming_iterations_count": by_status(summary(out_tok)),
        "prompt_token_count": by_status(summary(in_tok)),
        "output_token_count": by_status(summary(out_tok)),
        "total_token_count": by_status(summary(in_tok + out_tok)),
        "time_to_first_token_ms": by_status(summary(ttft_ms)),
        "time_to_first_output_token_ms": by_status(summary(ttft_ms)),
        "time_per_output_token_ms": by_status(summary(tpot_ms, out_tok, count=n_ok)),
        "inter_token_latency_ms": by_status(summary(itl_ms, out_tok - 1, count=n_ok)),
        "prompt_tokens_per_second": by_status(rate_summary(run.first_token_s, in_tok)),
        "output_tokens_per_second": by_status(rate_summary(tok_t, tok_w)),
        "tokens_per_second": by_status(
            rate_summary(
                np.concatenate((run.first_token_s, tok_t)), np.concatenate((in_tok, tok_w))
            )
        ),
        "output_tokens_per_iteration": by_status(summary(np.ones(n_ok))),
        "iter_tokens_per_iteration": by_status(summary(np.ones(int(many.sum())))),
    }
