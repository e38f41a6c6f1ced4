"""A self-contained ``report.html`` for a sweep: the points table, plots (inlined), spec.

Built from the sweep directory's records alone (``sweep.csv``, ``sweep.yaml``, the
points' ``steps.csv``). Every string that came from an input is HTML-escaped.
"""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from reports.html import inline_png
from reports.sweep_data import SweepFrame, load_sweep_frame
from reports.sweep_plots import render_sweep_plots

_STYLE = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:right}th{background:#f4f4f4}pre{background:#f8f8f8;padding:1em;overflow:auto}
img{max-width:100%}.bad{color:#b00}"""

_TABLE_COLUMNS = [
    "seed",
    "status",
    "window_offered_rps",
    "window_throughput_rps",
    "window_ttft_s_p90",
    "window_tpot_s_p90",
    "window_e2e_s_p99",
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


def headline(frame: SweepFrame) -> str:
    """Where saturation starts along a numeric x axis, per line: "steady up to X; first
    not shown steady: Y" (a value counts as steady when every seed's run is), or ""."""
    ok = frame.ok
    if ok.empty or not frame.x_is_numeric() or frame.x == "point":
        return ""
    unit = " req/s" if frame.x.endswith("arrival.rate") else ""
    parts = []
    groups = ok.groupby(frame.series, sort=True) if frame.series else [((), ok)]
    for key, grp in groups:
        steady = grp.groupby(frame.x)["verdict"].apply(lambda v: bool((v == "steady").all()))
        steady = steady.sort_index()
        last = first_bad = None
        for x, is_steady in steady.items():
            if not is_steady:
                first_bad = x
                break
            last = x
        label = frame.series_label(key if isinstance(key, tuple) else (key,))
        lead = f"{label}: " if label else ""
        if first_bad is None:
            parts.append(f"{lead}steady at every {frame.x} up to {last:g}{unit}")
        elif last is None:
            parts.append(f"{lead}not steady even at {first_bad:g}{unit}")
        else:
            parts.append(
                f"{lead}steady up to {last:g}{unit}; first not shown steady: {first_bad:g}{unit}"
            )
    return "; ".join(parts)


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
    head = headline(frame)
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
        f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"{f'<p><strong>{html.escape(head)}</strong></p>' if head else ''}"
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
