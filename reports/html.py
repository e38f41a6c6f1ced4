"""A self-contained ``report.html`` for a run: summary, plots (inlined), config.

Every string that came from an input is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_STYLE = """body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{text-align:left;background:#f4f4f4}pre{background:#f8f8f8;padding:1em;overflow:auto}
img{max-width:100%}.notes{background:#fff4e0;border:1px solid #e0a040;padding:.5em 1em}"""


def inline_png(png: Path) -> str:
    """A plot as an HTML heading and an ``<img>`` carrying the PNG itself (base64), so
    the page stands alone."""
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    name = html.escape(png.stem)
    return f'<h3>{name}</h3><img alt="{name}" src="data:image/png;base64,{data}">'


def plus_minus(value: float, ci: Any, scale: float = 1.0, digits: int = 1) -> str:
    """``value ±half-width`` of a 95% interval ``[lo, hi]`` (both times ``scale``, with
    ``digits`` decimals), or the value alone when ``ci`` is not an interval."""
    text = f"{value * scale:,.{digits}f}"
    if isinstance(ci, list) and len(ci) == 2:
        text += f" ±{(ci[1] - ci[0]) / 2 * scale:,.{digits}f}"
    return text


def _window_table(window: Any) -> str:
    """The measurement window's steady-state figures (ms; 95% intervals as ±)."""
    if not isinstance(window, dict) or "ttft_s" not in window:
        return ""
    head = "<tr><th>metric</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th></tr>"
    rows = [head]
    for key, name in (("ttft_s", "TTFT (ms)"), ("tpot_s", "TPOT (ms)"), ("e2e_s", "E2E (ms)")):
        d = window[key]
        cells = "".join(
            f"<td>{plus_minus(d[q], d['ci95'].get(q), 1e3)}</td>"
            for q in ("mean", "p50", "p90", "p99")
        )
        rows.append(f"<tr><th>{name}</th>{cells}</tr>")
    thr = window["throughput_rps"]
    throughput = plus_minus(thr["value"], thr["ci95"], digits=2)
    kv = window["kv_usage"]
    facts = (
        f"{window['start_s']:,.1f} s to {window['end_s']:,.1f} s: {window['num_requests']:,} "
        f"requests arriving ({window['warmup_requests']:,} warm-up requests cut, the drain "
        f"after the last arrival excluded). Throughput {throughput} "
        f"req/s at an offered {window['offered_rps']:,.2f} req/s; "
        f"{window['output_tokens_per_s']:,.0f} output tok/s; KV usage mean {kv['mean']:.1%}, "
        f"max {kv['max']:.1%}; {window['preemptions_per_request']:.3f} preemptions per "
        "request. ± is the half-width of a 95% batch-means confidence interval; no ± where "
        "the window is too short for one."
    )
    return (
        f"<h2>Steady state (measurement window)</h2><p>{html.escape(facts)}</p>"
        f"<table>{''.join(rows)}</table>"
    )


def _rows(summary: dict[str, Any]) -> str:
    out = []
    for key, value in summary.items():
        if key == "window":
            continue  # its own table
        if isinstance(value, dict):
            value = ", ".join(
                f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in value.items()
            )
        elif isinstance(value, float):
            value = f"{value:.4g}"
        out.append(f"<tr><th>{html.escape(str(key))}</th><td>{html.escape(str(value))}</td></tr>")
    return "\n".join(out)


def _limit_lines(summary: dict[str, Any]) -> list[str]:
    """Requests that met max_model_len, when any: rejected prompts (``rejected`` /
    ``num_rejected``) and capped outputs (``num_capped_outputs``); [] when none."""

    def count(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    lines = []
    rejected = summary.get("rejected")
    rejected = rejected if isinstance(rejected, dict) else {}
    num = count(rejected.get("prompt_too_long")) or count(summary.get("num_rejected"))
    limit = count(rejected.get("max_model_len"))
    within = f" (prompt of at least max_model_len, {limit:,} tokens)" if limit else ""
    if num:
        total = count(summary.get("num_requests"))
        of = f" of {total:,}" if total else ""
        lines.append(f"{num:,}{of} requests rejected{within}: they never ran")
    capped = count(summary.get("num_capped_outputs"))
    if capped:
        lines.append(
            f"{capped:,} requests' outputs capped at max_model_len: they produced fewer "
            "output tokens than asked"
        )
    return lines


def _notes_block(notes: Sequence[str]) -> str:
    """The report's warning lines (escaped), or "" when there are none."""
    if not notes:
        return ""
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return f"<div class='notes'><strong>Note</strong><ul>{items}</ul></div>"


def render_report(run_dir: Path, title: str = "kvsim run", notes: Sequence[str] = ()) -> Path:
    """Write ``report.html`` from ``summary.json``, ``plots/*.png`` and ``config.yaml``.

    ``notes``: warning lines shown above the summary (e.g. a truncated ``steps.csv``:
    :func:`reports.run_records.read_run_records`); rejected and capped requests from
    the summary are added to them when non-zero.
    """
    summary = json.loads((run_dir / "summary.json").read_text())
    config = (run_dir / "config.yaml").read_text() if (run_dir / "config.yaml").exists() else ""
    images = [inline_png(png) for png in sorted((run_dir / "plots").glob("*.png"))]
    window = summary.get("window")
    window_notes = window.get("warnings", []) if isinstance(window, dict) else []
    notes_html = _notes_block(
        [*notes, *_limit_lines(summary), *(f"measurement window: {w}" for w in window_notes)]
    )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
        f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"{notes_html}{_window_table(window)}"
        f"<h2>Whole run</h2><table>{_rows(summary)}</table><h2>Plots</h2>{''.join(images)}"
        f"<h2>Configuration</h2><pre>{html.escape(config)}</pre></body></html>\n"
    )
    path = run_dir / "report.html"
    path.write_text(page)
    return path
