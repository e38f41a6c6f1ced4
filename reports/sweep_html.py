"""A self-contained ``report.html`` for a sweep: the points table, plots (inlined), spec.

Built from the sweep directory's records alone (``sweep.csv``, ``sweep.yaml``, the
points' ``steps.csv``). Every string that came from an input is HTML-escaped.
"""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from reports.html import inline_png
from reports.sweep_data import load_sweep_frame
from reports.sweep_plots import render_sweep_plots

_STYLE = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:right}th{background:#f4f4f4}pre{background:#f8f8f8;padding:1em;overflow:auto}
img{max-width:100%}.bad{color:#b00}"""

_TABLE_COLUMNS = [
    "seed",
    "status",
    "throughput_rps",
    "ttft_s_p90",
    "tpot_s_p90",
    "e2e_s_p99",
    "preemptions_per_request",
    "prefix_cache_hit_rate",
    "kv_usage_mean",
    "num_gpu_blocks",
    "verdict",
]
_MAX_ROWS = 500


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "" if pd.isna(value) else f"{value:.4g}"
    return str(value)


def _points_table(rows: pd.DataFrame, axes: list[str]) -> str:
    columns = ["point", *axes, *[c for c in _TABLE_COLUMNS if c in rows.columns]]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for _, row in rows.head(_MAX_ROWS).iterrows():
        bad = ' class="bad"' if row.get("status") != "ok" else ""
        cells = "".join(f"<td>{html.escape(_cell(row[c]))}</td>" for c in columns)
        body.append(f"<tr{bad}>{cells}</tr>")
    more = (
        f"<p>({len(rows) - _MAX_ROWS} more rows in sweep.csv)</p>" if len(rows) > _MAX_ROWS else ""
    )
    return f"<table><tr>{head}</tr>{''.join(body)}</table>{more}"


def render_sweep_report(sweep_dir: Path) -> Path:
    """Render ``plots/*.png`` and ``report.html`` of a sweep directory; return the page."""
    sweep_dir = Path(sweep_dir)
    frame = load_sweep_frame(sweep_dir)
    images = [inline_png(png) for png in render_sweep_plots(sweep_dir)]
    meta = sweep_dir / "sweep.yaml"
    spec_text = meta.read_text() if meta.is_file() else ""
    statuses = frame.rows["status"].value_counts().to_dict()
    counts = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    title = f"kvsim sweep: {frame.name}"
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
        f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{len(frame.rows)} points ({html.escape(counts)}); x axis: "
        f"<code>{html.escape(frame.x)}</code>; lines: "
        f"<code>{html.escape(', '.join(frame.series) or '-')}</code>. "
        "Seeds are averaged, their min-max spread shaded.</p>"
        f"<h2>Plots</h2>{''.join(images) or '<p>No finished points.</p>'}"
        f"<h2>Points</h2>{_points_table(frame.rows, frame.axes)}"
        f"<h2>Sweep spec</h2><pre>{html.escape(spec_text)}</pre></body></html>\n"
    )
    path = sweep_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
