"""The recommend report: the Pareto chart (PNG) and a self-contained ``report.html``,
from the recommend document alone.

The chart: every simulated configuration that met the SLOs (grey dots, one per
candidate and probed rate), the Pareto frontier (line and circles) and the chosen
deployment (star: its cluster check at the target rate). The page: the ranked top-N
table, the counts, each top candidate's ``vllm serve`` line, and every candidate with
its status and why.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from reports.figures import save_png  # noqa: E402
from reports.html import _STYLE, inline_png  # noqa: E402
from sim.recommend.describe import COLUMNS, counts_line, fewer_line, top_rows  # noqa: E402


def plot_pareto(doc: dict[str, Any], path: Path) -> Path:
    """Write the Pareto chart of a recommend document to ``path`` (PNG)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    pts = [p for p in doc["points"] if p.get("tokens_per_s_per_user") is not None]
    if pts:
        ax.scatter(
            [p["tokens_per_s_per_gpu"] for p in pts],
            [p["tokens_per_s_per_user"] for p in pts],
            s=12,
            color="0.6",
            label="met the SLOs (candidate at a probed rate)",
        )
    front = doc["pareto"]
    if front:
        ax.plot(
            [p["tokens_per_s_per_gpu"] for p in front],
            [p["tokens_per_s_per_user"] for p in front],
            "o-",
            color="tab:blue",
            ms=5,
            label="Pareto frontier",
        )
    chosen = doc.get("chosen_point")
    if chosen and chosen.get("tokens_per_s_per_user") is not None:
        ax.scatter(
            [chosen["tokens_per_s_per_gpu"]],
            [chosen["tokens_per_s_per_user"]],
            marker="*",
            s=180,
            color="tab:red",
            zorder=5,
            label=f"chosen: {chosen['key']}",
        )
    ax.set_xlabel("output tokens/s per GPU")
    ax.set_ylabel("tokens/s per user (1 / mean TPOT)")
    ax.grid(alpha=0.3)
    if pts or front:
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_png(fig, path, dpi=90, metadata={"Software": None})


def _table(head: tuple[str, ...] | list[str], rows: list[list[str]]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{cells}</tr>{body}</table>"


def _candidate_rows(doc: dict[str, Any]) -> list[list[str]]:
    rows = []
    for c in doc["candidates"]:
        bound = (c.get("bounds") or {}).get("rate_bound")
        rows.append(
            [
                c["key"],
                c["status"],
                "-" if bound is None else f"{bound:.3g}",
                "-" if c.get("rate") is None else f"{c['rate']:.3g}",
                "-" if c.get("rank") is None else str(c["rank"]),
                c.get("reason") or "",
            ]
        )
    return rows


def render_recommend_report(out: Path, doc: dict[str, Any], png: Path) -> Path:
    """Write ``report.html`` in ``out``."""
    slo = ", ".join(f"{k} <= {v:g}" for k, v in doc["slo"].items())
    target = f"{doc['target_rate']:g} req/s" if doc["target_rate"] else "max goodput per GPU"
    title = f"kvsim recommend: {doc['model']} on {doc['workload']}"
    by_key = {c["key"]: c for c in doc["candidates"]}
    serve = "".join(
        f"<p>#{i} {html.escape(k)}</p><pre>{html.escape(by_key[k]['vllm_serve'])}</pre>"
        for i, k in enumerate(doc["ranking"][: doc["top"]], start=1)
    )
    fewer = fewer_line(doc)
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{html.escape(target)}; SLOs {html.escape(slo)}; "
        f"router {html.escape(doc['router'])}</p>"
        f"<h2>Top {doc['top']} by {html.escape(doc['scored_by'])}</h2>"
        + _table(COLUMNS, top_rows(doc))
        + f"<p>{html.escape(counts_line(doc))}</p>"
        + (f"<p>{html.escape(fewer)}</p>" if fewer else "")
        + "<h2>Pareto frontier</h2>"
        + inline_png(png)
        + "<h2>vllm serve</h2>"
        + serve
        + "<h2>Every candidate</h2>"
        + _table(
            ("candidate", "status", "rate bound", "rate per replica", "rank", "why"),
            _candidate_rows(doc),
        )
        + f"<h2>Spec</h2><pre>{html.escape(json.dumps(doc['spec'], indent=2))}</pre>"
        + "</body></html>\n"
    )
    path = Path(out) / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
