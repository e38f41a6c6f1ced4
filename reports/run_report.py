"""Render a run directory's plots and ``report.html`` from its files alone.

Used right after a run (``kvsim run``) and again by ``kvsim report RUN`` on any run
directory, also older ones and ones written with ``--steps thin`` or ``none``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from reports.html import render_report
from reports.plots import render_run_plots
from reports.run_records import (
    RunRecordsError,
    read_request_records,
    read_step_records,
    steps_mode,
)

if TYPE_CHECKING:
    import pandas as pd

    from reports.step_follow import StepFollower
    from reports.step_stream import StepRows


@dataclass
class RenderedRun:
    """The page written and one line per problem found in the records (empty: none)."""

    page: Path
    notes: list[str]


def run_title(config: dict[str, Any]) -> str:
    """``kvsim run: <workload> on <model> / <gpu>`` from a run's ``config.yaml``."""
    workload = config.get("workload") or {}
    name = workload.get("name", "?") if isinstance(workload, dict) else "?"
    return f"kvsim run: {name} on {config.get('model', '?')} / {config.get('gpu', '?')}"


def render_run(
    run_dir: Path, parallel: bool = False, follower: StepFollower | None = None
) -> RenderedRun:
    """Re-render ``plots/`` and ``report.html`` of ``run_dir``. ValueError (or
    :class:`reports.run_records.RunRecordsError`) when ``summary.json`` is not an
    object or a records file cannot be read at all. ``parallel``: two processes draw
    the plots (:func:`reports.plots.render_run_plots`); ``follower``: what read the
    steps file while the run wrote it (:func:`reports.run_records.read_step_records`)."""
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    if not isinstance(summary, dict):
        raise ValueError(f"{run_dir / 'summary.json'}: expected a JSON object")
    # The requests first, so that a parallel render's child draws their plots while
    # this process reads the steps file. When both files are unreadable, the steps
    # file's error is the one raised.
    try:
        requests, request_notes = read_request_records(run_dir, summary)
    except RunRecordsError:
        read_step_records(run_dir, summary, follower)
        raise
    step_notes: list[str] = []

    def steps() -> pd.DataFrame | StepRows:
        rows, notes = read_step_records(run_dir, summary, follower)
        step_notes.extend(notes)
        return rows

    config_file = run_dir / "config.yaml"
    config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else {}
    config = config if isinstance(config, dict) else {}
    note = " - steps thinned" if steps_mode(summary)[0] == "thin" else ""
    render_run_plots(
        run_dir,
        int(summary["num_gpu_blocks"]),
        steps,
        requests,
        summary=summary,
        note=note,
        parallel=parallel,
    )
    notes = step_notes + request_notes
    page = render_report(run_dir, title=run_title(config), notes=notes)
    return RenderedRun(page, notes)
