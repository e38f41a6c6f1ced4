"""A self-contained ``report.html`` for a run, read top to bottom by an operator:

the verdict and its reasons as sentences, the measurement window's figures in ms, %
and req/s, the KV cache budget and where it came from, the timeline (KV usage,
queues, preemptions on one time axis), per-replica small multiples, latency
histograms, the whole run's figures (labelled as such), then config.yaml and
summary.json as they are. Every string that came from an input is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from reports.run_facts import (
    budget_line,
    limit_lines,
    replica_rows,
    steps_line,
    verdict_text,
    whole_run_rows,
)

STYLE = """body{font-family:system-ui,sans-serif;max-width:1120px;margin:1.5em auto;color:#222;
font-size:15px;line-height:1.4}h1{font-size:24px;margin:.2em 0 .5em}h2{font-size:19px;
margin:1.2em 0 .4em;border-bottom:1px solid #ddd}table{border-collapse:collapse;margin:.3em 0}
td,th{border:1px solid #ccc;padding:3px 9px;text-align:right}th{text-align:left;
background:#f4f4f4}pre{background:#f8f8f8;padding:1em;overflow:auto;font-size:12px}
img{max-width:100%}.notes{background:#fff4e0;border:1px solid #e0a040;padding:.4em 1em;
margin:.6em 0}.verdict{padding:.6em 1em;border-left:8px solid #888;background:#f4f4f4;
margin:.6em 0;font-size:16px}.verdict ul{margin:.3em 0}.steady{border-color:#2e7d32;
background:#e8f5e9}.saturated{border-color:#c62828;background:#fdecea}.undecided{
border-color:#f9a825;background:#fff8e1}.small{color:#555;font-size:13px}
.budget{background:#eef3fb;border:1px solid #9db4dd;padding:.4em 1em}
table.glance td{text-align:left}a{color:#1a5fb4}caption{text-align:left;color:#555;
font-size:13px}"""
"""The CSS every kvsim report page shares (run, sweep, plan)."""
_STYLE = STYLE  # the name other modules imported before

_PLOT_CAPTIONS = {
    "timeline": (
        "Shaded green: the measurement window (warm-up cut, drain after the last arrival "
        "left out). KV cache: blocks in use (dark) and cached blocks no request holds "
        "(light: reusable by prefix hits, evicted on demand); 100% is every usable block. "
        "Levels are means per time bin; preemptions are counted per bin."
    ),
    "replicas": "Each replica on the same axes: an idle or overloaded replica stands out.",
    "latency": "Vertical lines: p50, p90 and p99 (printed in the legend).",
    "pd": (
        "Prefill/decode disaggregation. Left: each instance's share of the run in steps "
        "(P: prefill, D: decode). Right: TTFT's parts, their means stacked (the mean "
        "TTFT) and each part's p90; the decode queue includes the step computing the "
        "first token."
    ),
    "spec_acceptance": (
        "Per time bin: draft tokens accepted over draft tokens verified (dashed: the whole "
        "run). Acceptance is drawn by kvsim's acceptance model, so the curve is flat but "
        "for noise and for drafts cut short near a request's end."
    ),
}


def inline_png(png: Path, caption: str = "") -> str:
    """A plot as an ``<img>`` carrying the PNG itself (base64), so the page stands
    alone, with ``caption`` (escaped) under it."""
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    name = html.escape(png.stem)
    note = f"<p class='small'>{html.escape(caption)}</p>" if caption else ""
    return f'<img alt="{name}" src="data:image/png;base64,{data}">{note}'


def plus_minus(value: float, ci: Any, scale: float = 1.0, digits: int = 1) -> str:
    """``value ±half-width`` of a 95% interval ``[lo, hi]`` (both times ``scale``, with
    ``digits`` decimals), or the value alone when ``ci`` is not an interval."""
    text = f"{value * scale:,.{digits}f}"
    if isinstance(ci, list) and len(ci) == 2:
        text += f" ±{(ci[1] - ci[0]) / 2 * scale:,.{digits}f}"
    return text


def _table(rows: Sequence[tuple[str, str]], cls: str = "") -> str:
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<table class='{cls}'>{body}</table>"


def _verdict_block(summary: dict[str, Any]) -> str:
    state, head, lines = verdict_text(summary)
    items = "".join(f"<li>{html.escape(x)}</li>" for x in lines)
    return (
        f"<div class='verdict {html.escape(state)}'><strong>{html.escape(head)}</strong>"
        f"{f'<ul>{items}</ul>' if items else ''}</div>"
    )


def _glance(summary: dict[str, Any]) -> str:
    """The measurement window's figures: throughput, KV usage, preemptions, requests,
    then the latency table (ms)."""
    window = summary.get("window")
    if not isinstance(window, dict) or "ttft_s" not in window:
        return ""
    thr = window["throughput_rps"]
    kv = window["kv_usage"]
    rows = [
        (
            "throughput",
            f"{plus_minus(thr['value'], thr['ci95'], digits=2)} req/s finished (offered "
            f"{window['offered_rps']:,.2f} req/s); {window['output_tokens_per_s']:,.0f} "
            "output tok/s",
        ),
        (
            "KV cache usage",
            f"mean {kv['mean']:.1%}, p99 {kv['p99']:.1%}, max {kv['max']:.1%} of the blocks",
        ),
        ("preemptions", f"{window['preemptions_per_request']:.3f} per request"),
        (
            "requests",
            f"{window['num_requests']:,} arrived in the window ({window['warmup_requests']:,} "
            f"warm-up requests cut); {summary['num_finished']:,} of "
            f"{summary['num_requests']:,} finished in the whole run",
        ),
        (
            "prefix cache hit rate",
            f"{summary['prefix_cache_hit_rate']:.1%} of prompt tokens (whole run)",
        ),
    ]
    head = "<tr><th>latency (ms)</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th></tr>"
    lat = [head]
    for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
        d = window[key]
        cells = "".join(
            f"<td>{plus_minus(d[q], d['ci95'].get(q), 1e3)}</td>"
            for q in ("mean", "p50", "p90", "p99")
        )
        lat.append(f"<tr><th>{name}</th>{cells}</tr>")
    span = (
        f"{window['start_s']:,.1f} s to {window['end_s']:,.1f} s of simulated time: warm-up "
        "cut by MSER-5, the drain after the last arrival left out. ± is the half-width of a "
        "95% batch-means confidence interval (none where the window is too short for one)."
    )
    return (
        "<h2>Steady state (measurement window)</h2>"
        f"{_table(rows, 'glance')}<table>{''.join(lat)}</table>"
        f"<p class='small'>{html.escape(span)}</p>"
    )


def _notes_block(notes: Sequence[str]) -> str:
    """The report's warning lines (escaped), or "" when there are none."""
    if not notes:
        return ""
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return f"<div class='notes'><strong>Note</strong><ul>{items}</ul></div>"


def _replica_table(summary: dict[str, Any]) -> str:
    rows = replica_rows(summary)
    if not rows:
        return ""
    heads = ("replica", "routed", "finished", "preemptions", "prefix hit rate", "KV usage mean")
    head = "".join(f"<th>{h}</th>" for h in heads)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    router = html.escape(str(summary.get("router", "?")))
    return f"<table><caption>router: {router}</caption><tr>{head}</tr>{body}</table>"


def _plots(run_dir: Path, after: dict[str, str]) -> str:
    """The plots in report order, each under its heading and above its caption, then
    ``after[stem]`` (HTML) when given."""
    order = ("timeline", "replicas", "latency")
    pngs = sorted(
        (run_dir / "plots").glob("*.png"),
        key=lambda p: (order.index(p.stem) if p.stem in order else len(order), p.name),
    )
    headings = {"timeline": "Timeline", "replicas": "Replicas", "latency": "Latency"}
    return "".join(
        f"<h2>{html.escape(headings.get(p.stem, p.stem))}</h2>"
        + inline_png(p, _PLOT_CAPTIONS.get(p.stem, ""))
        + after.get(p.stem, "")
        for p in pngs
    )


def _read_config(run_dir: Path) -> tuple[str, dict[str, Any]]:
    path = run_dir / "config.yaml"
    if not path.exists():
        return "", {}
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    return text, data if isinstance(data, dict) else {}


def render_report(run_dir: Path, title: str = "kvsim run", notes: Sequence[str] = ()) -> Path:
    """Write ``report.html`` from ``summary.json``, ``plots/*.png`` and ``config.yaml``.

    ``notes``: warning lines shown above the summary (e.g. a truncated ``steps.csv``:
    :func:`reports.run_records.read_step_records`); rejected and capped requests from
    the summary and the window's warnings are added to them.
    """
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    config_text, config = _read_config(run_dir)
    window = summary.get("window")
    window_notes = window.get("warnings", []) if isinstance(window, dict) else []
    notes_html = _notes_block(
        [*notes, *limit_lines(summary), *(f"measurement window: {w}" for w in window_notes)]
    )
    steps = steps_line(summary)
    steps_html = f"<p class='small'>{html.escape(steps)}</p>" if steps else ""
    budget = (
        "<p class='budget'><strong>KV cache:</strong> "
        f"{html.escape(budget_line(summary, config))}</p>"
    )
    whole = _table(whole_run_rows(summary))
    raw = json.dumps(summary, indent=2)
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
        f"</title><style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"{_verdict_block(summary)}{notes_html}{_glance(summary)}{budget}{steps_html}"
        f"{_plots(run_dir, {'replicas': _replica_table(summary)})}"
        "<h2>Whole run (warm-up and drain included)</h2>"
        f"{whole}"
        "<h2>Files</h2><details><summary>config.yaml: the resolved configuration</summary>"
        f"<pre>{html.escape(config_text)}</pre></details>"
        "<details><summary>summary.json: every figure, in seconds and fractions</summary>"
        f"<pre>{html.escape(raw)}</pre></details></body></html>\n"
    )
    path = run_dir / "report.html"
    path.write_text(page)
    return path
