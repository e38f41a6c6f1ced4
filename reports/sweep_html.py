"""A self-contained ``report.html`` for a sweep: the headline (where it stops being
steady, the best point), the plots (inlined), every point with a link to its own
report, and the spec.

Built from the sweep directory's records alone (``sweep.csv``, ``sweep.yaml``, the
points' ``steps.csv``). Every string that came from an input is HTML-escaped.
"""

from __future__ import annotations

import html
from pathlib import Path

from reports.axis_names import axis_label, short_name
from reports.html import STYLE, inline_png
from reports.plan_table import bounds_text
from reports.sweep_data import SweepFrame, load_sweep_frame
from reports.sweep_plots import render_sweep_plots
from reports.sweep_table import COLUMNS, headline_lines, point_rows

_MAX_ROWS = 500
_CAPTIONS = {
    "throughput": "Requests finished per second in each point's measurement window against "
    "the x axis; dotted: the offered load. Where the line falls below it, the "
    "configuration no longer keeps up.",
    "latency": "Latency percentiles where every seed is steady; red crosses along the top: "
    "values where a seed is not shown steady (their latency only measures how long the run "
    "was).",
}


def headline(frame: SweepFrame) -> str:
    """The headline as one line (``; ``-joined): where each line is steady, the best point."""
    return "; ".join(headline_lines(frame))


def _points_table(sweep_dir: Path, frame: SweepFrame) -> str:
    rows = point_rows(frame)
    errors = any(r.error for r in rows)
    heads = ["point", "seed", "verdict", *(c.header for c in COLUMNS)]
    heads += ["SLOs"] if frame.slo else []
    heads += ["error"] if errors else []
    heads += ["id"]
    body = []
    for r in rows[:_MAX_ROWS]:
        point_dir = sweep_dir / "points" / r.point_id
        target = "report.html" if (point_dir / "report.html").is_file() else ""
        link = html.escape(f"points/{r.point_id}/{target}", quote=True)
        cells = [
            f"<td><a href='{link}'>{html.escape(r.cell)}</a></td>",
            f"<td>{html.escape(r.seed)}</td>",
            f"<td class='v-{html.escape(r.verdict)}'>{html.escape(r.verdict)}</td>",
            *(f"<td>{html.escape(c)}</td>" for c in r.cells),
        ]
        if frame.slo:
            cells.append(f"<td>{html.escape(r.slo)}</td>")
        if errors:
            cells.append(f"<td>{html.escape(r.error)}</td>")
        cells.append(f"<td><code>{html.escape(r.point_id)}</code></td>")
        bad = ' class="bad"' if r.status != "ok" else ""
        body.append(f"<tr{bad}>{''.join(cells)}</tr>")
    more = ""
    if len(rows) > _MAX_ROWS:
        more = f"<p>({len(rows) - _MAX_ROWS} more rows in sweep.csv)</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in heads)
    note = (
        "<p class='small'>Figures of each point's measurement window. '-': latency of a "
        "point not shown steady (left out), or a figure the point does not have. The id "
        "is the point's directory under points/ (a hash of its configuration).</p>"
    )
    return f"<table class='points'><tr>{head}</tr>{''.join(body)}</table>{more}{note}"


_SWEEP_STYLE = """table.points td{font-size:13px}.v-steady{color:#2e7d32}
.v-saturated,.v-undecided,.bad{color:#b00}.headline{font-size:17px;border-color:#1a5fb4;
background:#eef3fb}.grid{display:flex;flex-wrap:wrap;gap:1%}.grid figure{width:49%;margin:0}"""


def render_sweep_report(sweep_dir: Path) -> Path:
    """Render ``plots/*.png`` and ``report.html`` of a sweep directory; return the page."""
    sweep_dir = Path(sweep_dir)
    frame = load_sweep_frame(sweep_dir)
    pngs = render_sweep_plots(sweep_dir)
    wide = [p for p in pngs if p.stem in _CAPTIONS]
    small = [p for p in pngs if p.stem not in _CAPTIONS]
    images = "".join(inline_png(p, _CAPTIONS[p.stem]) for p in wide)
    if small:
        figures = "".join(f"<figure>{inline_png(p)}</figure>" for p in small)
        images += f"<div class='grid'>{figures}</div>"
    meta = sweep_dir / "sweep.yaml"
    spec_text = meta.read_text() if meta.is_file() else ""
    statuses = frame.rows["status"].value_counts().to_dict()
    counts = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    title = f"kvsim sweep: {frame.name}"
    lines = headline_lines(frame)
    head = "".join(f"<li>{html.escape(x)}</li>" for x in lines)
    head_html = f"<div class='verdict headline'><ul>{head}</ul></div>" if head else ""
    axes = f"x axis: {axis_label(frame.x)}"
    if frame.series:
        axes += "; one line per " + ", ".join(short_name(s, frame.axes) for s in frame.series)
    slo = ""
    if frame.slo:
        slo = f" SLOs (measurement window): {bounds_text(frame.slo)}."
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
        f"</title><style>{STYLE}{_SWEEP_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{head_html}"
        f"<p>{len(frame.rows)} points ({html.escape(counts)}); {html.escape(axes)}. Seeds are "
        f"averaged, their min-max spread shaded.{html.escape(slo)}</p>"
        f"<h2>Plots</h2>{images or '<p>No finished points.</p>'}"
        f"<h2>Points</h2>{_points_table(sweep_dir, frame)}"
        f"<h2>Sweep spec</h2><pre>{html.escape(spec_text)}</pre></body></html>\n"
    )
    path = sweep_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
