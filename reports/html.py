"""A self-contained ``report.html`` for a run: summary, plots (inlined), config.

Every string that came from an input is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

_STYLE = """body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{text-align:left;background:#f4f4f4}pre{background:#f8f8f8;padding:1em;overflow:auto}
img{max-width:100%}"""


def inline_png(png: Path) -> str:
    """A plot as an HTML heading and an ``<img>`` carrying the PNG itself (base64), so
    the page stands alone."""
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    name = html.escape(png.stem)
    return f'<h3>{name}</h3><img alt="{name}" src="data:image/png;base64,{data}">'


def _rows(summary: dict[str, Any]) -> str:
    out = []
    for key, value in summary.items():
        if isinstance(value, dict):
            value = ", ".join(
                f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in value.items()
            )
        elif isinstance(value, float):
            value = f"{value:.4g}"
        out.append(f"<tr><th>{html.escape(str(key))}</th><td>{html.escape(str(value))}</td></tr>")
    return "\n".join(out)


def render_report(run_dir: Path, title: str = "kvsim run") -> Path:
    """Write ``report.html`` from ``summary.json``, ``plots/*.png`` and ``config.yaml``."""
    summary = json.loads((run_dir / "summary.json").read_text())
    config = (run_dir / "config.yaml").read_text() if (run_dir / "config.yaml").exists() else ""
    images = [inline_png(png) for png in sorted((run_dir / "plots").glob("*.png"))]
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
        f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<h2>Summary</h2><table>{_rows(summary)}</table><h2>Plots</h2>{''.join(images)}"
        f"<h2>Configuration</h2><pre>{html.escape(config)}</pre></body></html>\n"
    )
    path = run_dir / "report.html"
    path.write_text(page)
    return path
