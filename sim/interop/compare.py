"""Simulated against real: the rows of ``kvsim compare``.

Each row is one figure computed the same way on both sides, by the real tool's own
definition: for a ``vllm bench serve`` result kvsim's run is exported as one
(:mod:`sim.interop.vllm_bench`, with the percentiles the real file has) and the same
keys are read; for a GuideLLM report likewise (:mod:`sim.interop.guidellm`); for an
LLMServingSim log both sides' per-request times go through the same statistics.
The signed error is ``(sim - real) / |real|`` in percent: positive means kvsim's figure
is higher.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.interop.guidellm import build_guidellm
from sim.interop.real import RealResult
from sim.interop.run_dir import RunData
from sim.interop.vllm_bench import build_vllm_bench

METRIC_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}
_STAT_KEY = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")


@dataclass(frozen=True)
class Row:
    """One figure: what it is (with its unit), the real and the simulated value."""

    label: str
    real: float
    sim: float

    @property
    def error_pct(self) -> float | None:
        """``(sim - real) / |real|`` in percent; None when the real value is 0."""
        if self.real == 0:
            return None
        return (self.sim - self.real) / abs(self.real) * 100.0


@dataclass(frozen=True)
class Comparison:
    """The rows, and notes on how far the two runs are comparable."""

    kind: str
    rows: list[Row]
    notes: list[str]


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _vllm_rows(real: dict[str, Any], run: RunData) -> list[Row]:
    found = [m for k in real if (m := _STAT_KEY.match(k))]
    pcts = sorted({float(m.group(1)[1:]) for m in found if m.group(1).startswith("p")})
    sim = build_vllm_bench(run, tuple(pcts) or (99.0,))
    rows = []
    scalars = (
        ("completed", "completed requests"),
        ("failed", "failed requests"),
        ("total_input_tokens", "input tokens"),
        ("total_output_tokens", "output tokens"),
        ("duration", "duration (s)"),
        ("request_throughput", "request throughput (req/s)"),
        ("output_throughput", "output throughput (tok/s)"),
        ("total_token_throughput", "total token throughput (tok/s)"),
        ("max_output_tokens_per_s", "peak output tokens/s"),
        ("max_concurrent_requests", "peak concurrent requests"),
    )
    for key, label in scalars:
        r, s = _num(real.get(key)), _num(sim.get(key))
        if r is not None and s is not None:
            rows.append(Row(label, r, s))

    def rank(m: re.Match[str]) -> tuple[int, int, float]:
        stat = m.group(1)
        pct = float(stat[1:]) if stat.startswith("p") else 0.0
        return list(METRIC_NAMES).index(m.group(2)), {"mean": 0, "median": 1}.get(stat, 2), pct

    for m in sorted((m for m in found if m.group(1) != "std"), key=rank):
        r, s = _num(real[m.group(0)]), _num(sim.get(m.group(0)))
        if r is not None and s is not None:
            rows.append(Row(f"{METRIC_NAMES[m.group(2)]} {m.group(1)} (ms)", r, s))
    return rows


GUIDELLM_DISTRIBUTIONS = (
    ("time_to_first_token_ms", "TTFT", "ms"),
    ("inter_token_latency_ms", "ITL", "ms"),
    ("time_per_output_token_ms", "TPOT", "ms"),
    ("request_latency", "latency", "s"),
)
GUIDELLM_STATS = ("mean", "median", "p90", "p95", "p99")


def _guidellm_rows(real: dict[str, Any], run: RunData) -> list[Row]:
    sim = build_guidellm(run)["benchmarks"][0]
    rows = []
    rd, sd = _num(real.get("duration")), _num(sim.get("duration"))
    rm, sm = real.get("metrics", {}), sim["metrics"]
    totals = (rm.get("request_totals") or {}).get("successful")
    if _num(totals) is not None:
        rows.append(
            Row("successful requests", float(totals), float(sm["request_totals"]["successful"]))
        )
    if rd is not None and sd is not None:
        rows.append(Row("duration (s)", rd, sd))
    for key, label in (
        ("requests_per_second", "requests/s mean"),
        ("output_tokens_per_second", "output tokens/s mean"),
        ("tokens_per_second", "tokens/s mean"),
        ("request_concurrency", "concurrency mean"),
    ):
        r = _num(((rm.get(key) or {}).get("successful") or {}).get("mean"))
        if r is not None:
            rows.append(Row(label, r, sm[key]["successful"]["mean"]))
    for key, label, unit in GUIDELLM_DISTRIBUTIONS:
        rdist = (rm.get(key) or {}).get("successful") or {}
        sdist = sm[key]["successful"]
        for stat in GUIDELLM_STATS:
            if stat in ("mean", "median"):
                r, s = _num(rdist.get(stat)), sdist[stat]
            else:
                r, s = _num((rdist.get("percentiles") or {}).get(stat)), sdist["percentiles"][stat]
            if r is not None:
                rows.append(Row(f"{label} {stat} ({unit})", r, float(s)))
    return rows


def _latency_stats(
    start: np.ndarray, first: np.ndarray, finish: np.ndarray, out: np.ndarray
) -> dict[str, dict[str, float]]:
    """TTFT, TPOT, latency in ms: mean, median, p90, p95, p99 (numpy's percentiles)."""
    series = {
        "TTFT": (first - start) * 1e3,
        "TPOT": (finish - first) / np.maximum(1, out - 1) * 1e3,
        "latency": (finish - start) * 1e3,
    }
    stats = {}
    for name, x in series.items():
        p50, p90, p95, p99 = np.percentile(x, [50, 90, 95, 99])
        stats[name] = {
            "mean": float(x.mean()),
            "median": float(p50),
            "p90": float(p90),
            "p95": float(p95),
            "p99": float(p99),
        }
    return stats


def _log_rows(real: dict[str, Any], run: RunData) -> list[Row]:
    r = _latency_stats(
        real["start_s"], real["first_token_s"], real["finish_s"], real["output_tokens"]
    )
    s = _latency_stats(run.arrival_s, run.first_token_s, run.finish_s, run.output_tokens)
    r_span = float(real["finish_s"].max() - real["start_s"].min())
    s_span = float(run.finish_s.max() - run.arrival_s.min()) if run.num_finished else 0.0
    rows = [
        Row("requests", float(real["start_s"].size), float(run.num_finished)),
        Row("makespan (s)", r_span, s_span),
        Row(
            "throughput (req/s)",
            real["start_s"].size / r_span,
            run.num_finished / s_span if s_span else 0.0,
        ),
        Row(
            "output throughput (tok/s)",
            float(real["output_tokens"].sum()) / r_span,
            float(run.output_tokens.sum()) / s_span if s_span else 0.0,
        ),
    ]
    for name in ("TTFT", "TPOT", "latency"):
        for stat in ("mean", "median", "p90", "p95", "p99"):
            rows.append(Row(f"{name} {stat} (ms)", r[name][stat], s[name][stat]))
    return rows


def _notes(kind: str, real: dict[str, Any], run: RunData) -> list[str]:
    """Where the two runs did not serve the same work."""
    notes = []
    if kind == "llmservingsim":
        n_real, in_real = int(real["start_s"].size), int(real["prompt_tokens"].sum())
        out_real = int(real["output_tokens"].sum())
    elif kind == "vllm-bench":
        n_real = int(real.get("completed") or 0)
        in_real = int(real.get("total_input_tokens") or 0)
        out_real = int(real.get("total_output_tokens") or 0)
    else:
        n_real = int(
            ((real.get("metrics") or {}).get("request_totals") or {}).get("successful") or 0
        )
        in_real = out_real = -1
    if n_real != run.num_finished:
        notes.append(
            f"the real run finished {n_real:,} requests, the simulation {run.num_finished:,}"
        )
    if in_real >= 0 and in_real != int(run.prompt_tokens.sum()):
        notes.append(
            f"input tokens differ: real {in_real:,}, simulated {int(run.prompt_tokens.sum()):,} "
            "(not the same requests?)"
        )
    if out_real >= 0 and out_real != int(run.output_tokens.sum()):
        notes.append(
            f"output tokens differ: real {out_real:,}, simulated {int(run.output_tokens.sum()):,}"
        )
    return notes


def compare(real: RealResult, run: RunData) -> Comparison:
    """The side-by-side rows of ``real`` against the simulated ``run``."""
    builders = {"vllm-bench": _vllm_rows, "guidellm": _guidellm_rows, "llmservingsim": _log_rows}
    # benchmark clients measure client-side; LLMServingSim's logs hold engine timestamps
    seen = run if real.kind == "llmservingsim" else run.client()
    rows = builders[real.kind](real.data, seen)
    return Comparison(real.kind, rows, _notes(real.kind, real.data, run))
