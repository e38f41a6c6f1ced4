"""Sweeps: a grid of runs from one YAML spec, run in parallel (local processes or Ray),
resumable, summarised in ``sweep.csv`` and a report.

Public API::

    load_sweep_spec(path) -> SweepSpec        # strict; SweepSpecError on bad input
    expand_points(spec, file, scale) -> list[Point]
    run_sweep(path, out, executor=..., jobs=..., address=..., scale=...) -> SweepResult
"""

from sim.sweep.points import Point, expand_points
from sim.sweep.runner import SweepResult, prepare, run_sweep
from sim.sweep.spec import Axis, SweepSpec, SweepSpecError, load_sweep_spec

__all__ = [
    "Axis",
    "Point",
    "SweepResult",
    "SweepSpec",
    "SweepSpecError",
    "expand_points",
    "load_sweep_spec",
    "prepare",
    "run_sweep",
]
