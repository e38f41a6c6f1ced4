"""The files of a recommend directory from its document: ``pareto.csv``,
``plots/pareto.png``, ``report.html`` and, last, ``recommend.json``.

``pareto.csv`` has one row per simulated configuration that met the SLOs (a candidate
at one probed rate), then the chosen deployment's own point: ``key``, ``gpu``,
``tensor_parallel_size``, ``rate`` (req/s per replica; empty for the chosen
deployment's row), ``replicas`` (the chosen row only), ``tokens_per_s_per_gpu``,
``tokens_per_s_per_user``, ``on_frontier`` and ``chosen`` (0 or 1).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from sim.sweep.table import write_atomic

PARETO_COLUMNS = (
    "key",
    "gpu",
    "tensor_parallel_size",
    "rate",
    "replicas",
    "tokens_per_s_per_gpu",
    "tokens_per_s_per_user",
    "on_frontier",
    "chosen",
)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def pareto_csv(doc: dict[str, Any]) -> str:
    """The text of ``pareto.csv`` (see the module docstring)."""
    on = {(p["key"], p["rate"]) for p in doc["pareto"]}
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(PARETO_COLUMNS)
    for p in doc["points"]:
        row = {**p, "replicas": None, "on_frontier": int((p["key"], p["rate"]) in on), "chosen": 0}
        writer.writerow([_cell(row.get(c)) for c in PARETO_COLUMNS])
    chosen = doc.get("chosen_point")
    if chosen is not None:
        top = next(c for c in doc["candidates"] if c["key"] == chosen["key"])
        row = {
            **chosen,
            "gpu": top["gpu"],
            "tensor_parallel_size": top["tensor_parallel_size"],
            "on_frontier": 0,
            "chosen": 1,
        }
        writer.writerow([_cell(row.get(c)) for c in PARETO_COLUMNS])
    return buf.getvalue()


def write_outputs(out: Path, doc: dict[str, Any]) -> None:
    """Write every file; ``recommend.json`` last (its presence marks a finished run)."""
    from reports.recommend_report import plot_pareto, render_recommend_report

    write_atomic(out / "pareto.csv", pareto_csv(doc))
    png = plot_pareto(doc, out / "plots" / "pareto.png")
    render_recommend_report(out, doc, png)
    write_atomic(out / "recommend.json", json.dumps(doc, indent=2) + "\n")
