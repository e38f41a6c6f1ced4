"""Run a sweep: validate every point, skip finished ones, run the rest, keep sweep.csv.

The sweep directory::

    DIR/sweep.yaml          the spec as validated, the scale and the kvsim version
    DIR/inputs/<id>.yaml    edited workloads, one per point that has one
    DIR/points/<id>/        one complete run directory per point (or error.json)
    DIR/sweep.csv           one row per finished point, in point order
    DIR/plots/, report.html the sweep report (``reports.sweep_html``)
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kvcore import __version__
from sim.app.outdir import check_output, write_marker
from sim.sweep.executors import default_jobs, execute_local, execute_ray
from sim.sweep.points import Point, expand_points
from sim.sweep.spec import SweepSpec, SweepSpecError, load_sweep_spec
from sim.sweep.table import SweepTable, write_atomic
from sim.sweep.validate import validate_points

SWEEP_YAML = "sweep.yaml"


@dataclass
class SweepResult:
    """What a ``run_sweep`` call did."""

    out: Path
    num_points: int
    skipped: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    errors: dict[int, BaseException] = field(default_factory=dict)


def prepare(path: str | Path, scale: float = 1.0) -> tuple[SweepSpec, list[Point]]:
    """Load, expand and validate a sweep spec; SweepSpecError on any bad input."""
    if not 0.0 < scale <= 1.0:
        raise SweepSpecError(f"--scale: must be in (0, 1] (got {scale})")
    spec = load_sweep_spec(path)
    points = expand_points(spec, str(path), scale)
    validate_points(points, str(path))
    return spec, points


def _clean_leftovers(points_dir: Path) -> None:
    """Remove temporary directories a killed run left behind (``.<id>.tmp-*``)."""
    if not points_dir.is_dir():
        return
    for entry in points_dir.iterdir():
        if entry.name.startswith(".") and (".tmp-" in entry.name or ".old-" in entry.name):
            shutil.rmtree(entry, ignore_errors=True)


def _write_inputs(out: Path, points: list[Point]) -> None:
    inputs = out / "inputs"
    for point in points:
        if point.workload_spec is None:
            continue
        inputs.mkdir(parents=True, exist_ok=True)
        target = inputs / f"{point.point_id}.yaml"
        text = yaml.safe_dump(point.workload_spec, sort_keys=False)
        if not target.is_file() or target.read_text() != text:
            write_atomic(target, text)


def _payload(out: Path, point: Point, max_length_factor: int = 1) -> dict[str, Any]:
    workload_path = workload_yaml = None
    if point.workload_spec is not None:
        workload_path = str((out / "inputs" / f"{point.point_id}.yaml").resolve())
        workload_yaml = yaml.safe_dump(point.workload_spec, sort_keys=False)
    return {
        "run": point.run,
        "out": str((out / "points" / point.point_id).resolve()),
        "workload_path": workload_path,
        "workload_yaml": workload_yaml,
        "max_length_factor": max_length_factor,
    }


def _write_meta(out: Path, spec: SweepSpec, path: str | Path, scale: float) -> None:
    meta = {
        "kvsim_version": __version__,
        "source": str(path),
        "scale": scale,
        "spec": spec.model_dump(mode="json"),
    }
    write_atomic(out / SWEEP_YAML, yaml.safe_dump(meta, sort_keys=False))


def run_sweep(
    path: str | Path,
    out: str | Path,
    *,
    executor: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    scale: float = 1.0,
    on_start: Callable[[int, int], None] | None = None,
    on_point: Callable[[Point, str], None] | None = None,
    render: bool = True,
    force: bool = False,
) -> SweepResult:
    """Run every unfinished point of the sweep at ``path`` into ``out``.

    ``on_start(total, already_done)`` is called once, ``on_point(point, status)`` after
    each point. Points whose directory is complete are skipped; sweep.csv is rewritten
    after each point. Raises SweepSpecError on bad input and
    :class:`sim.app.outdir.OutputError` on an ``out`` that may not be written (``force``:
    see :func:`sim.app.outdir.check_output`); nothing is run then.
    """
    if executor not in ("local", "ray"):
        raise SweepSpecError(f"--executor: unknown executor {executor!r} (allowed: local, ray)")
    if jobs is not None and jobs < 1:
        raise SweepSpecError(f"--jobs: must be >= 1 (got {jobs})")
    spec, points = prepare(path, scale)
    check_output(out, "sweep", force=force)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_marker(out, "sweep")
    _write_meta(out, spec, path, scale)
    _clean_leftovers(out / "points")
    _write_inputs(out, points)
    table = SweepTable(out, spec.axis_paths(), points)
    pending = [p for p in points if not table.refresh(p)]
    table.write()
    result = SweepResult(out=out, num_points=len(points), skipped=len(points) - len(pending))
    if on_start:
        on_start(len(points), result.skipped)

    def done(index: int, status: str) -> None:
        point = points[index]
        table.refresh(point)
        table.write()
        result.statuses[status] = result.statuses.get(status, 0) + 1
        if on_point:
            on_point(point, status)

    payloads = [(p.index, _payload(out, p, spec.length.max_factor)) for p in pending]
    if executor == "ray":
        result.errors = execute_ray(
            payloads, jobs, address, lambda i: table.point_dir(points[i]), done
        )
    else:
        result.errors = execute_local(payloads, jobs or default_jobs(), done)
    if render:
        from reports.sweep_html import render_sweep_report

        render_sweep_report(out)
    return result
