"""Check every point of a sweep before anything runs.

Each point's engine settings are validated as an ``EngineConfig``, its workload
mapping as a ``WorkloadSpec``, and every distinct configuration is resolved the way
``kvsim run`` resolves one (model, GPU, KV budget, workload), so a bad value anywhere
in the grid is one ``SweepSpecError`` naming the spec file, the axis and the field
before the first point starts.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from sim.app.engine_config import EngineConfig
from sim.app.setup import resolve_run
from sim.sweep.points import Point
from sim.sweep.spec import SweepSpecError
from sim.sweep.worker import make_run_spec
from workloads.errors import from_validation_error
from workloads.spec import WorkloadSpec


def _where(point: Point, field: str) -> str:
    """``axis 'workload.arrival.rate' = -1`` when an axis set ``field``, else ``base.<field>``."""
    for path, value in point.values.items():
        inside = "." in field and path.startswith(field + ".")  # a mapping the axis created
        if field == path or field.startswith(path + ".") or inside:
            return f"axis {path!r} = {value!r}: {field}"
    return f"base.{field}"


def _check_model(
    point: Point, file: str, section: str, model: type[BaseModel], data: dict[str, Any]
) -> None:
    try:
        model.model_validate(data)
    except ValidationError as e:
        err = from_validation_error(e, file, model)
        field = f"{section}.{err.field}" if err.field else section
        raise SweepSpecError(f"{file}: {_where(point, field)}: {err.reason}") from None


def _check_point(point: Point, file: str) -> None:
    _check_model(point, file, "engine", EngineConfig, point.run["engine"])
    if point.workload_spec is not None:
        _check_model(point, file, "workload", WorkloadSpec, point.workload_spec)


def _resolve(point: Point, file: str, tmp: Path) -> None:
    """Resolve one point as ``kvsim run`` would; SweepSpecError with its message."""
    workload_path = None
    if point.workload_spec is not None:
        workload_path = tmp / f"{point.point_id}.yaml"
        workload_path.write_text(yaml.safe_dump(point.workload_spec, sort_keys=False))
    try:
        resolve_run(make_run_spec(point.run, workload_path))
    except (ValueError, TypeError) as e:
        message = str(e)
        if workload_path is not None:
            message = message.replace(str(workload_path), "workload")
        raise SweepSpecError(f"{file}: {point.label()}: {message}") from None


def validate_points(points: list[Point], file: str) -> None:
    """Raise SweepSpecError for the first point that ``kvsim run`` would reject."""
    if not points:
        raise SweepSpecError(f"{file}: the sweep has no points")
    seen: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="kvsim-sweep-check-") as tmp:
        for point in points:
            _check_point(point, file)
            key = json.dumps(
                [{k: v for k, v in point.run.items() if k != "seed"}, point.workload_spec],
                sort_keys=True,
                default=str,
            )
            if key in seen:
                continue
            seen.add(key)
            _resolve(point, file, Path(tmp))
