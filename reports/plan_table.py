"""A plan's answer and probes as an operator reads them, from ``plan.json`` alone:
the headline sentence, and one row per probe seed with each SLO metric in ms (its 95%
interval in brackets) against its bound; shared by the HTML report and the table
``kvsim plan`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.markup import escape
from rich.table import Table

from reports.axis_names import axis_label, axis_unit
from reports.run_facts import reason_sentence

METRIC_NAMES = {
    "ttft_mean_s": "TTFT mean",
    "ttft_p90_s": "TTFT p90",
    "tpot_mean_s": "TPOT mean",
    "tpot_p99_s": "TPOT p99",
    "e2e_p99_s": "E2E p99",
    "max_preemptions_per_request": "preemptions / request",
}
"""Each SLO (``sim.records.slo`` names) as the reports name it."""

_ASKS = {
    "max_rate": "Highest arrival rate meeting the SLOs",
    "min_replicas": "Fewest replicas meeting the SLOs",
    "min_kv": "Smallest {param} meeting the SLOs",
}


def metric_header(metric: str) -> str:
    """``TTFT p90 (ms)``; ``preemptions / request``."""
    name = METRIC_NAMES.get(metric, metric)
    return f"{name} (ms)" if metric.endswith("_s") else name


def metric_value(metric: str, value: float, ci: list[float] | None = None) -> str:
    """A metric in the report's unit (ms for latencies) with ``[lo, hi]`` when given."""
    if metric.endswith("_s"):
        text = f"{value * 1e3:,.1f}"
        if ci:
            text += f" [{ci[0] * 1e3:,.1f}, {ci[1] * 1e3:,.1f}]"
        return text
    text = f"{value:.3f}"
    return text + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def bounds_text(slo: dict[str, float]) -> str:
    """``TTFT p90 <= 500 ms, TPOT p99 <= 50 ms`` from SLOs by name (seconds)."""
    parts = []
    for metric, bound in slo.items():
        unit = " ms" if metric.endswith("_s") else ""
        shown = f"{bound * 1e3:g}" if metric.endswith("_s") else f"{bound:g}"
        parts.append(f"{METRIC_NAMES.get(metric, metric)} <= {shown}{unit}")
    return ", ".join(parts)


def miss_text(metric: str, value: float, bound: float) -> str:
    """``TTFT p90 885.7 ms > 500.0 ms``."""
    unit = " ms" if metric.endswith("_s") else ""
    return (
        f"{METRIC_NAMES.get(metric, metric)} {metric_value(metric, value)}{unit} > "
        f"{metric_value(metric, bound)}{unit}"
    )


def slo_text(doc: dict[str, Any]) -> str:
    """A plan's SLOs (:func:`bounds_text`)."""
    return bounds_text(doc["slo"])


def probe_value(value: float) -> str:
    """A probed value as the plan names it (4 significant digits: ``11.31``)."""
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


def _with_unit(doc: dict[str, Any], value: float | None) -> str:
    if value is None:
        return "none"
    unit = doc.get("unit") or axis_unit(doc["param"])
    return f"{probe_value(value)} {unit}".rstrip()


def seed_failures(doc: dict[str, Any], seed: dict[str, Any]) -> str:
    """Why a probe seed fails: each SLO it misses in the report's units (``TTFT p90
    885.7 ms > 500 ms``), or the verdict's reasons when it was not steady."""
    metrics = seed.get("metrics")
    reasons = seed.get("reasons") or []
    if not metrics and reasons:
        return f"{seed.get('state')}: " + " ".join(reason_sentence(r) for r in reasons)
    if not metrics:
        return "; ".join(seed.get("failures") or []) or str(seed.get("state", ""))
    out = []
    for metric, bound in doc["slo"].items():
        value = metrics.get(metric)
        if value is not None and value > bound:
            out.append(miss_text(metric, value, bound))
    return "; ".join(out) or "; ".join(seed.get("failures") or [])


def _failing_seed(doc: dict[str, Any], value: float | None) -> dict[str, Any] | None:
    """The first seed that fails at the probed ``value``, or None."""
    for probe in doc["probes"]:
        if probe["value"] == value:
            for seed in probe["seeds"]:
                if not seed["passed"]:
                    return seed
    return None


def _why(doc: dict[str, Any], value: float | None) -> str:
    """``saturates (seed 0): <reasons>`` or ``fails (seed 0: <SLO misses>)``."""
    seed = _failing_seed(doc, value)
    if seed is None:
        return "fails"
    reasons = seed.get("reasons") or []
    if seed.get("state") == "saturated" and not seed.get("metrics") and reasons:
        return f"saturates (seed {seed['seed']}): " + " ".join(reason_sentence(r) for r in reasons)
    return f"fails (seed {seed['seed']}: {seed_failures(doc, seed)})."


def headline_lines(doc: dict[str, Any]) -> list[str]:
    """The answer as sentences: what was asked and found, the bracket, and the
    failure at its edge."""
    param = doc["param"]
    ask = _ASKS.get(doc["question"], "Answer").format(param=param)
    plan = doc.get("plan") or {}
    at = ""
    if doc["question"] != "max_rate" and plan.get("rate") is not None:
        at = f" at {probe_value(plan['rate'])} req/s"
    slo = slo_text(doc)
    b = doc["bracket"]
    if "limits" in doc:
        return _split_headline(doc, at, slo)
    if doc["status"] == "infeasible" or doc["answer"] is None:
        lines = [f"{ask}{at} ({slo}): none of the values searched."]
    else:
        lines = [f"{ask}{at} ({slo}): {_with_unit(doc, doc['answer'])}."]
    if b["last_pass"] is not None and b["first_fail"] is not None:
        lines.append(
            f"{_with_unit(doc, b['last_pass'])} passes; {_with_unit(doc, b['first_fail'])} "
            f"{_why(doc, b['first_fail'])}"
        )
    elif b["first_fail"] is not None:
        lines.append(f"Even {_with_unit(doc, b['first_fail'])} {_why(doc, b['first_fail'])}")
    if doc["status"] == "at_bound" and doc.get("bound") != "configuration":
        lines.append(f"Every probe passed up to the search limit: the true {param} is beyond it.")
    return lines + _spread_line(doc)


def _spread_line(doc: dict[str, Any]) -> list[str]:
    """The seeds' own answers, where they differ (a line), else nothing."""
    ci = doc.get("confidence_interval")
    if not ci or ci["low"] == ci["high"]:
        return []
    low, high = _with_unit(doc, ci["low"]), _with_unit(doc, ci["high"])
    return [f"Each seed on its own answers {low} to {high}."]


def _split_headline(doc: dict[str, Any], at: str, slo: str) -> list[str]:
    """:func:`headline_lines` of a P/D ``min_replicas`` plan (``split``, ``limits``)."""
    ask = f"Fewest prefill + decode instances meeting the SLOs{at} ({slo})"
    limits = doc["limits"]
    most = f"prefill={limits['prefill']},decode={limits['decode']}"
    split = doc.get("split")
    if split is None:
        corner = float(limits["prefill"] + limits["decode"])
        return [f"{ask}: none up to {most}.", f"Even {most} {_why(doc, corner)}"]
    lines = [
        f"{ask}: {split['prefill']} prefill + {split['decode']} decode = "
        f"{_with_unit(doc, doc['answer'])}."
    ]
    below = doc["bracket"]["first_fail"]
    if below is not None:
        lines.append(
            f"No split of {_with_unit(doc, below)} passes (searched up to {most}; "
            "each is probed or lies below a probed failure)."
        )
    if doc["status"] == "max_probes":
        lines.append("Stopped at search.max_probes: a smaller split may still pass.")
    return lines + _spread_line(doc)


def probe_label(doc: dict[str, Any], probe: dict[str, Any]) -> str:
    """A probe as the tables name it: its value with the unit, or its split
    (``prefill=1,decode=3``)."""
    split = probe.get("split")
    if split is not None:
        return f"prefill={split['prefill']},decode={split['decode']}"
    return _with_unit(doc, probe["value"])


@dataclass
class ProbeRow:
    """One probe seed, ready to print; ``metrics`` follow ``doc["slo"]``."""

    value: float
    value_text: str
    passed: bool
    seed: str
    verdict: str
    metrics: list[str]
    length: str
    failures: str
    run_dir: str


def probe_rows(doc: dict[str, Any]) -> list[ProbeRow]:
    """Every probe seed, by probed value."""
    rows = []
    for p in doc["probes"]:
        for s in p["seeds"]:
            metrics = s.get("metrics")
            intervals = s.get("intervals") or {}
            cells = [
                metric_value(k, metrics[k], intervals.get(k)) if metrics else "-"
                for k in doc["slo"]
            ]
            length = s.get("length") or {}
            runs = ""
            if length:
                total = length["start"] * length["factors"][-1]
                runs = f"{total:,.0f}{'' if length['key'] == 'num_requests' else ' s'}"
            rows.append(
                ProbeRow(
                    value=p["value"],
                    value_text=probe_label(doc, p),
                    passed=bool(s["passed"]),
                    seed=str(s["seed"]),
                    verdict=str(s.get("state", "")),
                    metrics=cells,
                    length=runs,
                    failures="" if s["passed"] else seed_failures(doc, s),
                    run_dir=str(s.get("run_dir", "")),
                )
            )
    return rows


def terminal_table(doc: dict[str, Any]) -> Table:
    """The probe table ``kvsim plan`` prints at the end (rich)."""
    searched = "prefill:decode splits" if "limits" in doc else axis_label(doc["param"])
    title = f"kvsim plan: {doc['question']}, searching {searched}"
    table = Table(title=title, title_justify="left")
    table.add_column("split" if "limits" in doc else doc["param"], justify="right")
    table.add_column("probe")
    table.add_column("seed", justify="right")
    table.add_column("verdict")
    for metric in doc["slo"]:
        table.add_column(metric_header(metric), justify="right")
    table.add_column("requests run", justify="right")
    style = {"steady": "green", "saturated": "red", "undecided": "yellow"}
    for r in probe_rows(doc):
        verdict = f"[{style.get(r.verdict, 'red')}]{escape(r.verdict)}[/]"
        probe = "[green]pass[/]" if r.passed else "[red]fail[/]"
        table.add_row(r.value_text, probe, r.seed, verdict, *r.metrics, r.length)
    table.caption = "latencies of the measurement window, [95% interval]; '-': not steady"
    return table
