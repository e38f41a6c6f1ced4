"""The plan report: the probe curve against the SLO lines, the answer, and a
self-contained ``report.html``, from ``plan.json`` alone.

One panel per SLO: each steady seed's measurement-window metric at each probed value
(dots) with its 95% interval where there is one (vertical bar), the worst seed per
probe (line), the SLO (dashed), the answer (green) and the bracket around it
(shaded). The probe table lists each seed's metrics as ``value [lo, hi]``. Saturated,
undecided or failed seeds have no meaningful latency: they are drawn as red crosses
along the top edge, never as values.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from reports.html import _STYLE  # noqa: E402


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


def plot_probe_curve(doc: dict[str, Any], path: Path) -> Path:
    """Write the probe-curve figure of a plan to ``path`` (PNG)."""
    slo = doc["slo"]
    probes = doc["probes"]
    fig, axes = plt.subplots(len(slo), 1, figsize=(7, 2.6 * len(slo)), squeeze=False)
    log_x = doc["param"] in ("rate", "num_gpu_blocks")
    for ax, (metric, bound) in zip(axes[:, 0], slo.items()):
        worst_x, worst_y = [], []
        for p in probes:
            ys = [s["metrics"][metric] for s in p["seeds"] if s.get("metrics")]
            ax.scatter([p["value"]] * len(ys), ys, s=14, color="tab:blue", alpha=0.6)
            for s in p["seeds"]:
                ci = _interval(s, metric)
                if ci is not None:
                    ax.vlines(p["value"], ci[0], ci[1], color="tab:blue", alpha=0.5, lw=1)
            if len(ys) == len(p["seeds"]):
                worst_x.append(p["value"])
                worst_y.append(max(ys))
            if len(ys) < len(p["seeds"]):
                ax.scatter(
                    [p["value"]],
                    [1.0],
                    marker="x",
                    color="tab:red",
                    s=40,
                    transform=ax.get_xaxis_transform(),
                    clip_on=False,
                )
        if worst_x:
            ax.plot(worst_x, worst_y, color="tab:blue", lw=1, label="worst seed")
        ax.axhline(bound, color="tab:orange", ls="--", label=f"SLO {bound:g}")
        b = doc["bracket"]
        if b["last_pass"] is not None and b["first_fail"] is not None:
            lo, hi = sorted((b["last_pass"], b["first_fail"]))
            ax.axvspan(lo, hi, color="tab:green", alpha=0.12)
        if doc["answer"] is not None:
            ax.axvline(doc["answer"], color="tab:green", label=f"answer {doc['answer']:.4g}")
        if log_x:
            ax.set_xscale("log")
        values = [p["value"] for p in probes]
        if values:
            ax.set_xlim(*_x_limits(values, log_x))
        ax.set_ylabel(metric)
        ax.legend(fontsize=7, loc="upper left")
    axes[-1, 0].set_xlabel(
        f"{doc['param']} (red x: saturated, undecided or failed; latency not meaningful)"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _interval(seed: dict[str, Any], metric: str) -> list[float] | None:
    """A seed's 95% interval ``[lo, hi]`` of ``metric`` (``plan.json`` ``intervals``),
    or None when it has none (window too short, saturated, or an older plan.json)."""
    intervals = seed.get("intervals") or {}
    ci = intervals.get(metric)
    return ci if isinstance(ci, list) and len(ci) == 2 else None


def _metric_text(seed: dict[str, Any], metric: str, value: float) -> str:
    ci = _interval(seed, metric)
    text = f"{metric} {value:.4g}"
    return text + (f" [{ci[0]:.4g}, {ci[1]:.4g}]" if ci else "")


def _probe_rows(doc: dict[str, Any]) -> str:
    rows = []
    for p in doc["probes"]:
        for s in p["seeds"]:
            m = s.get("metrics")
            shown = (
                ", ".join(_metric_text(s, k, v) for k, v in m.items()) if m else "(not meaningful)"
            )
            why = "; ".join(s.get("failures") or [])
            cells = (
                f"{p['value']:.4g}",
                "pass" if p["passed"] else "fail",
                str(s["seed"]),
                s.get("state", ""),
                shown,
                why,
            )
            rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return "\n".join(rows)


def render_plan_report(plan_dir: Path) -> Path:
    """Write ``plots/plan_probe_curve.png`` and ``report.html`` from ``plan.json``."""
    plan_dir = Path(plan_dir)
    doc = json.loads((plan_dir / "plan.json").read_text())
    png = plot_probe_curve(doc, plan_dir / "plots" / "plan_probe_curve.png")
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    b, ci = doc["bracket"], doc["confidence_interval"]
    answer = "none" if doc["answer"] is None else f"{doc['answer']:.4g} {doc['unit']}"
    facts = {
        "question": doc["question"],
        "status": doc["status"],
        "answer": answer,
        "bracket (last pass / first fail)": f"{b['last_pass']} / {b['first_fail']}",
        "per-seed answers (confidence interval)": f"{ci['low']:.4g} .. {ci['high']:.4g}"
        if ci
        else "n/a",
        "SLOs": ", ".join(f"{k} <= {v:g}" for k, v in doc["slo"].items()),
        "probes": str(doc["num_probes"]),
    }
    if doc.get("configuration_min") is not None:
        unit = f" {doc['unit']}" if doc["unit"] else ""
        facts["configuration bound (engine starts from)"] = (
            f"{doc['configuration_min']:.6g}{unit} for max_model_len {doc.get('max_model_len')}"
        )
        facts["answer bound by"] = str(doc.get("bound"))
    table = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in facts.items()
    )
    head = "".join(
        f"<th>{h}</th>"
        for h in ("value", "probe", "seed", "verdict", "metrics [95% interval]", "failures")
    )
    title = f"kvsim plan: {doc['question']}"
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<h2>Answer</h2><table>{table}</table>"
        f"<h2>Probe curve</h2><img alt='probe curve' src='data:image/png;base64,{data}'>"
        f"<h2>Probes</h2><table><tr>{head}</tr>{_probe_rows(doc)}</table>"
        f"<h2>Plan</h2><pre>{html.escape(json.dumps(doc['plan'], indent=2))}</pre>"
        "</body></html>\n"
    )
    out = plan_dir / "report.html"
    out.write_text(page)
    return out
