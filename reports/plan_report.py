"""The plan report: the answer in sentences, the probe curve against the SLO lines,
the probes (each linking to its run) and a self-contained ``report.html``, from
``plan.json`` alone (the runs at the bracket's edges get their own reports).

One panel per SLO: each steady seed's measurement-window metric at each probed value
(dots) with its 95% interval where there is one (vertical bar), the worst seed per
probe (line), the SLO (dashed), the answer (green) and the bracket around it
(shaded). The probe table lists each seed's metrics in ms as ``value [lo, hi]``. Saturated,
undecided or failed seeds have no meaningful latency: they are drawn as red crosses
along the top edge, never as values.
"""

from __future__ import annotations

import base64
import html
import json
import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator  # noqa: E402

from reports.axis_names import axis_label  # noqa: E402
from reports.figures import save_png  # noqa: E402
from reports.html import STYLE  # noqa: E402
from reports.plan_table import (  # noqa: E402
    headline_lines,
    metric_header,
    metric_value,
    probe_rows,
    probe_value,
    slo_text,
)


def _x_limits(values: list[float], log_x: bool) -> tuple[float, float]:
    """X-axis limits around the probed ``values`` (non-empty), 5 % padded.

    Contract: returns ``(low, high)`` with ``low < high``, and ``low > 0`` when
    ``log_x`` and every value is positive. A single probed value (a plan that stops
    at its first probe) gets a window around it instead of the zero-width range that
    matplotlib refuses with a warning.
    """
    lo, hi = min(values), max(values)
    if log_x and lo > 0:
        pad = (hi / lo) ** 0.05 if hi > lo else 2.0
        return lo / pad, hi * pad
    span = (hi - lo) or abs(lo) or 1.0
    return lo - 0.05 * span, hi + 0.05 * span


def _scale(metric: str) -> float:
    """The factor a metric is drawn at: ms for seconds, else as it is."""
    return 1e3 if metric.endswith("_s") else 1.0


def plot_probe_curve(doc: dict[str, Any], path: Path) -> Path:
    """Write the probe-curve figure of a plan to ``path`` (PNG)."""
    slo = doc["slo"]
    probes = doc["probes"]
    fig, axes = plt.subplots(len(slo), 1, figsize=(11, 2.9 * len(slo) + 0.4), squeeze=False)
    log_x = doc["param"] in ("rate", "num_gpu_blocks")
    for ax, (metric, bound) in zip(axes[:, 0], slo.items()):
        _draw_seeds(ax, probes, metric)
        _draw_slo_and_answer(ax, doc, metric, bound)
        _finish_panel(ax, [p["value"] for p in probes], metric, log_x)
    axes[-1, 0].set_xlabel(
        f"{axis_label(doc['param'])}; red x: not steady or failed (latency not meaningful)"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_png(fig, path)


def _draw_seeds(ax: plt.Axes, probes: list[dict[str, Any]], metric: str) -> None:
    """One SLO panel's seeds: each steady seed's metric (dot, ms for seconds) with its
    95% interval (bar), the worst seed per probe (line), a red cross along the top
    for a probe with a seed not steady or failed."""
    k = _scale(metric)
    worst_x, worst_y = [], []
    crossed = False
    for p in probes:
        ys = [s["metrics"][metric] * k for s in p["seeds"] if s.get("metrics")]
        ax.scatter([p["value"]] * len(ys), ys, s=18, color="tab:blue", alpha=0.7)
        for s in p["seeds"]:
            ci = _interval(s, metric)
            if ci is not None:
                ax.vlines(p["value"], ci[0] * k, ci[1] * k, color="tab:blue", alpha=0.5, lw=1)
        if len(ys) == len(p["seeds"]):
            worst_x.append(p["value"])
            worst_y.append(max(ys))
        if len(ys) < len(p["seeds"]):
            ax.scatter(
                [p["value"]],
                [1.0],
                marker="x",
                color="tab:red",
                s=50,
                transform=ax.get_xaxis_transform(),
                clip_on=False,
                label=None if crossed else "not steady or failed",
            )
            crossed = True
    if worst_x:
        ax.plot(worst_x, worst_y, color="tab:blue", lw=1, label="worst seed")


def _draw_slo_and_answer(ax: plt.Axes, doc: dict[str, Any], metric: str, bound: float) -> None:
    """One SLO panel's bound (dashed), the bracket (shaded) and the answer (green)."""
    unit = doc.get("unit") or ""
    shown = metric_value(metric, bound) + (" ms" if metric.endswith("_s") else "")
    ax.axhline(bound * _scale(metric), color="tab:orange", ls="--", label=f"SLO {shown}")
    b = doc["bracket"]
    if b["last_pass"] is not None and b["first_fail"] is not None:
        lo, hi = sorted((b["last_pass"], b["first_fail"]))
        ax.axvspan(lo, hi, color="tab:green", alpha=0.12, label="bracket")
    if doc["answer"] is not None:
        ax.axvline(
            doc["answer"],
            color="tab:green",
            label=f"answer {probe_value(doc['answer'])} {unit}".rstrip(),
        )


def _finish_panel(ax: plt.Axes, values: list[float], metric: str, log_x: bool) -> None:
    """One SLO panel's axes (log x with 1-2-5 ticks for ``log_x``, limits around the
    probed ``values``), its label and legend."""
    if log_x:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
    if values:
        ax.set_xlim(*_x_limits(values, log_x))
    ax.set_ylim(bottom=0)
    ax.set_ylabel(metric_header(metric))
    ax.legend(fontsize=9, loc="upper left", framealpha=0.9)


def _interval(seed: dict[str, Any], metric: str) -> list[float] | None:
    """A seed's 95% interval ``[lo, hi]`` of ``metric`` (``plan.json`` ``intervals``),
    or None when it has none (window too short, saturated, or an older plan.json)."""
    intervals = seed.get("intervals") or {}
    ci = intervals.get(metric)
    return ci if isinstance(ci, list) and len(ci) == 2 else None


def probe_run_dir(plan_dir: Path, run_dir: str) -> Path:
    """A probe seed's run directory under ``plan_dir`` (``plan.json`` holds the path as
    the plan was run, maybe relative to another working directory)."""
    run = Path(run_dir)
    return plan_dir / "probes" / run.parent.name / run.name


def render_bracket_runs(plan_dir: Path, doc: dict[str, Any]) -> list[Path]:
    """Render the run reports of the probes at the bracket's edges (last pass, first
    fail: the runs an operator opens to see why); probes run without reports. Runs
    that cannot be rendered are skipped. Returns the pages written."""
    from reports.run_report import render_run

    edges = {doc["bracket"]["last_pass"], doc["bracket"]["first_fail"]} - {None}
    pages = []
    for probe in doc["probes"]:
        if probe["value"] not in edges:
            continue
        for seed in probe["seeds"]:
            run = probe_run_dir(plan_dir, seed.get("run_dir", ""))
            if not (run / "summary.json").is_file():
                continue
            try:
                pages.append(render_run(run).page)
            except (OSError, ValueError, KeyError):
                continue
    return pages


def _probe_table(plan_dir: Path, doc: dict[str, Any]) -> str:
    heads = [
        axis_label(doc["param"]),
        "probe",
        "seed",
        "verdict",
        *(f"{metric_header(m)} [95% interval]" for m in doc["slo"]),
        "requests run",
        "why it fails",
    ]
    rows = []
    for r in probe_rows(doc):
        run = probe_run_dir(plan_dir, r.run_dir)
        target = run / "report.html" if (run / "report.html").is_file() else run
        link = html.escape(os.path.relpath(target, plan_dir), quote=True)
        verdict = "<td class='v-steady'>pass</td>" if r.passed else "<td class='bad'>fail</td>"
        cells = [
            f"<td><a href='{link}'>{html.escape(r.value_text)}</a></td>",
            verdict,
            f"<td>{html.escape(r.seed)}</td>",
            f"<td class='v-{html.escape(r.verdict)}'>{html.escape(r.verdict)}</td>",
            *(f"<td>{html.escape(c)}</td>" for c in r.metrics),
            f"<td>{html.escape(r.length)}</td>",
            f"<td class='why'>{html.escape(r.failures)}</td>",
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    head = "".join(f"<th>{html.escape(h)}</th>" for h in heads)
    return f"<table class='probes'><tr>{head}</tr>{''.join(rows)}</table>"


_PLAN_STYLE = """.v-steady{color:#2e7d32}.v-saturated,.v-undecided,.v-failed,.bad{color:#b00}
td.why{text-align:left;font-size:12px;max-width:420px}table.probes td{font-size:13px}"""


_CURVE_CAPTION = (
    "One panel per SLO: each steady seed's measurement-window figure at each probed "
    "value (dot) with its 95% interval (bar), the worst seed (line), the SLO (dashed), "
    "the answer (green line) and the bracket around it (shaded)."
)


def render_plan_report(plan_dir: Path) -> Path:
    """Write ``plots/plan_probe_curve.png`` (a P/D ``min_replicas`` plan:
    ``plots/plan_split_map.png``) and ``report.html`` from ``plan.json`` (and the run
    reports of the probes at the bracket's edges)."""
    plan_dir = Path(plan_dir)
    doc = json.loads((plan_dir / "plan.json").read_text())
    render_bracket_runs(plan_dir, doc)
    split = doc.get("split")
    if "limits" in doc:  # a P/D plan's splits
        from reports.plan_split_map import CAPTION, plot_split_map

        png = plot_split_map(doc, plan_dir / "plots" / "plan_split_map.png")
        figure, caption = "Split map", CAPTION
    else:
        png = plot_probe_curve(doc, plan_dir / "plots" / "plan_probe_curve.png")
        figure, caption = "Probe curve", _CURVE_CAPTION
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    b, ci = doc["bracket"], doc["confidence_interval"]
    unit = f" {doc['unit']}" if doc["unit"] else ""
    answer = "none" if doc["answer"] is None else f"{probe_value(doc['answer'])}{unit}"
    if split is not None:
        answer = f"{split['prefill']} prefill + {split['decode']} decode = {answer}"
    facts = {
        "question": doc["question"],
        "answer": answer,
        "search status": doc["status"],
        "bracket (last pass / first fail)": " / ".join(
            "none" if v is None else probe_value(v) for v in (b["last_pass"], b["first_fail"])
        ),
        "per-seed answers": f"{ci['low']:.4g} to {ci['high']:.4g}{unit}" if ci else "n/a",
        "SLOs (measurement window)": slo_text(doc),
        "probes": str(doc["num_probes"]),
    }
    if doc.get("configuration_min") is not None:
        facts["configuration bound (engine starts from)"] = (
            f"{doc['configuration_min']:.6g}{unit} for max_model_len {doc.get('max_model_len')}"
        )
        facts["answer bound by"] = str(doc.get("bound"))
    table = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in facts.items()
    )
    lines = "".join(f"<li>{html.escape(x)}</li>" for x in headline_lines(doc))
    state = "steady" if doc["answer"] is not None else "saturated"
    title = f"kvsim plan: {doc['question']}"
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}{_PLAN_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<div class='verdict {state}'><ul>{lines}</ul></div>"
        f"<h2>{figure}</h2><img alt='{figure.lower()}' src='data:image/png;base64,{data}'>"
        f"<p class='small'>{html.escape(caption)}</p>"
        f"<h2>Probes</h2>{_probe_table(plan_dir, doc)}"
        "<p class='small'>Each value links to its run (the report of the runs at the "
        "bracket's edges; <code>kvsim report DIR</code> renders any other).</p>"
        f"<h2>Answer</h2><table>{table}</table>"
        f"<h2>Plan</h2><pre>{html.escape(json.dumps(doc['plan'], indent=2))}</pre>"
        "</body></html>\n"
    )
    out = plan_dir / "report.html"
    out.write_text(page)
    return out
