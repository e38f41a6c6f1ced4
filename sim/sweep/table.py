"""``sweep.csv``: one row per finished point, built from the point directories alone.

Rows are in point order; a point appears once its directory is complete (a run's
``summary.json``, or a failed point's ``error.json``). The file is rewritten whole
under a temporary name and renamed into place after every point, so a killed sweep
never leaves a half-written row or a duplicate.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

import yaml

from sim.sweep.points import Point
from sim.sweep.worker import ERROR_FILE

SWEEP_CSV = "sweep.csv"

# summary.json key -> sub-keys (flattened as ``key_sub``), in column order.
METRICS: list[tuple[str, tuple[str, ...]]] = [
    ("num_requests", ()),
    ("num_finished", ()),
    ("num_rejected", ()),
    ("sim_duration_s", ()),
    ("throughput_rps", ()),
    ("output_tokens_per_s", ()),
    ("ttft_s", ("mean", "p50", "p90", "p99")),
    ("tpot_s", ("mean", "p50", "p90", "p99")),
    ("e2e_s", ("mean", "p50", "p90", "p99")),
    ("num_preemptions", ()),
    ("preemptions_per_request", ()),
    ("prefix_cache_hit_rate", ()),
    ("kv_usage", ("mean", "p99", "max")),
    ("num_gpu_blocks", ()),
    ("block_size", ()),
    ("num_steps", ()),
    ("num_replicas", ()),
    ("router", ()),
]
# The measurement window's figures (summary.json ``window``): value, and the 95%
# interval as a JSON pair (empty when the window gives none).
WINDOW_METRICS: list[tuple[str, tuple[str, ...]]] = [
    ("num_requests", ()),
    ("warmup_requests", ()),
    ("offered_rps", ()),
    ("throughput_rps", ("value", "ci95")),
    ("output_tokens_per_s", ()),
    ("ttft_s", ("mean", "p50", "p90", "p99")),
    ("tpot_s", ("mean", "p50", "p90", "p99")),
    ("e2e_s", ("mean", "p50", "p90", "p99")),
    ("preemptions_per_request", ()),
]


def _window_columns() -> list[str]:
    cols = []
    for key, subs in WINDOW_METRICS:
        if not subs:
            cols.append(f"window_{key}")
        elif key == "throughput_rps":
            cols += ["window_throughput_rps", "window_throughput_rps_ci95"]
        else:
            for sub in subs:
                cols += [f"window_{key}_{sub}", f"window_{key}_{sub}_ci95"]
    return cols


METRIC_COLUMNS = [
    *(f"{k}_{s}" if s else k for k, subs in METRICS for s in (subs or ("",))),
    *_window_columns(),
]


def header(axis_paths: list[str]) -> list[str]:
    """The sweep.csv columns: point, point_id, the axes, seed, status, metrics, verdict, error."""
    return ["point", "point_id", *axis_paths, "seed", "status", *METRIC_COLUMNS, "verdict", "error"]


def fmt(value: Any) -> str:
    """A CSV cell: exact floats (repr), lower-case booleans, JSON for structures."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value) if not isinstance(value, float) else repr(value)
    return json.dumps(value, sort_keys=True)


def is_complete(point_dir: Path) -> bool:
    """True when a point has finished: a whole run or a recorded failure."""
    return (point_dir / "summary.json").is_file() or (point_dir / ERROR_FILE).is_file()


def _metrics(summary: dict[str, Any]) -> list[str]:
    cells = []
    for key, subs in METRICS:
        value = summary.get(key)
        if subs:
            cells += [fmt((value or {}).get(s)) for s in subs]
        else:
            cells.append(fmt(value))
    window = summary.get("window") or {}
    for key, subs in WINDOW_METRICS:
        value = window.get(key)
        if not subs:
            cells.append(fmt(value))
        elif key == "throughput_rps":
            cells += [fmt((value or {}).get("value")), fmt((value or {}).get("ci95"))]
        else:
            ci = (value or {}).get("ci95") or {}
            for sub in subs:
                cells += [fmt((value or {}).get(sub)), fmt(ci.get(sub))]
    return cells


def _seed(point: Point, point_dir: Path) -> Any:
    if point.seed is not None:
        return point.seed
    config = point_dir / "config.yaml"
    if config.is_file():
        return (yaml.safe_load(config.read_text()) or {}).get("seed")
    return None


def point_row(point: Point, point_dir: Path) -> list[str] | None:
    """The sweep.csv row of a finished point; ``None`` while it has not finished."""
    if not is_complete(point_dir):
        return None
    axes = [fmt(v) for v in point.values.values()]
    lead = [str(point.index), point.point_id, *axes, fmt(_seed(point, point_dir))]
    summary_file = point_dir / "summary.json"
    if summary_file.is_file():
        summary = json.loads(summary_file.read_text())
        verdict = summary["verdict"]["state"] if "verdict" in summary else ""
        return [*lead, "ok", *_metrics(summary), verdict, ""]
    failure = json.loads((point_dir / ERROR_FILE).read_text())
    status = str(failure.get("status", "failed"))
    blank = [""] * len(METRIC_COLUMNS)
    return [*lead, status, *blank, "", " ".join(str(failure.get("error", "")).split())]


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class SweepTable:
    """The rows of a sweep, kept in memory and written to ``sweep.csv`` on each update."""

    def __init__(self, out: Path, axis_paths: list[str], points: list[Point]) -> None:
        self.out = out
        self.columns = header(axis_paths)
        self.points = points
        self.rows: dict[int, list[str]] = {}

    def point_dir(self, point: Point) -> Path:
        return self.out / "points" / point.point_id

    def refresh(self, point: Point) -> bool:
        """Read one point's directory; True when it has finished."""
        row = point_row(point, self.point_dir(point))
        if row is not None:
            self.rows[point.index] = row
        return row is not None

    def write(self) -> Path:
        """Rewrite sweep.csv with every finished point, in point order."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(self.columns)
        for index in sorted(self.rows):
            writer.writerow(self.rows[index])
        path = self.out / SWEEP_CSV
        write_atomic(path, buf.getvalue())
        return path
