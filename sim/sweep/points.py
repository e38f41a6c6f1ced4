"""Expand a sweep spec into points: one run configuration per grid cell and seed.

A point's configuration is the base with each axis value set at its dotted path.
Workloads given as a preset or YAML file are loaded into a mapping when an axis (or
``--scale``) edits them; the edited mapping is later written into the sweep directory
and run from there. Points are numbered in grid order (first axis outermost, seeds
innermost); a point's id (its directory name) is a hash of its configuration, so a
rerun of an edited spec reuses every point whose configuration did not change and
never a stale one.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sim.app.run import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_WORKLOAD
from sim.sweep.spec import Scalar, SweepSpec, SweepSpecError
from workloads.loader import YAML_SUFFIXES, preset_path


@dataclass(frozen=True)
class Point:
    """One run of a sweep.

    Attributes:
        index: position in grid order (the sweep.csv row order).
        point_id: a hash of the configuration, its directory name under ``points/``.
        values: axis path -> value, in axis order.
        seed: the replication seed (``None``: the workload's own seed).
        run: ``RunSpec`` keyword arguments; ``engine`` is a mapping, and ``workload`` is
            ``None`` when the workload is the mapping ``workload_spec``.
        workload_spec: the edited workload mapping, or ``None``.
    """

    index: int
    point_id: str
    values: dict[str, Scalar]
    seed: int | None
    run: dict[str, Any]
    workload_spec: dict[str, Any] | None

    def label(self) -> str:
        """``point 3 (workload.arrival.rate=8, seed 0)`` for messages."""
        parts = [f"{k}={v!r}" for k, v in self.values.items()]
        if self.seed is not None:
            parts.append(f"seed {self.seed}")
        return f"point {self.index}" + (f" ({', '.join(parts)})" if parts else "")


def _resolve_path(text: str, root: Path) -> str:
    """A file path from the spec, relative to the spec's directory when it exists there."""
    p = Path(text).expanduser()
    if not p.is_absolute() and (root / p).exists():
        return str((root / p).resolve())
    return str(p.resolve()) if p.exists() else text


def _base_workload(
    value: Any, root: Path, file: str, editable: bool
) -> tuple[str | None, dict | None]:
    """(preset name or path, None) or (None, mapping) for the base workload."""
    if isinstance(value, dict):
        return None, copy.deepcopy(value)
    if not isinstance(value, str):
        raise SweepSpecError(
            f"{file}: base.workload: expected a preset name, a file path or a mapping"
        )
    preset = preset_path(value)
    if preset is not None:
        source, name = preset, value
    else:
        name = _resolve_path(value, root)
        source = Path(name)
    if not editable:
        return name, None
    if source.suffix.lower() not in YAML_SUFFIXES or not source.is_file():
        raise SweepSpecError(
            f"{file}: base.workload: {value!r} is not a preset or workload YAML, so its "
            "fields cannot be swept or scaled"
        )
    try:
        loaded = yaml.safe_load(source.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise SweepSpecError(f"{file}: base.workload: cannot read {value!r}: {e}") from None
    if not isinstance(loaded, dict):
        raise SweepSpecError(f"{file}: base.workload: {value!r} is not a YAML mapping")
    return None, loaded


def set_path(target: dict[str, Any], path: list[str], value: Any, where: str) -> None:
    """Set ``target[path[0]][path[1]]... = value``, creating missing mappings."""
    node = target
    for i, key in enumerate(path[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise SweepSpecError(f"{where}: {'.'.join(path[: i + 1])} is not a mapping")
        node = child
    node[path[-1]] = value


def scale_workload(spec: dict[str, Any], scale: float) -> None:
    """Shrink a workload mapping's ``num_requests`` (or ``duration_s``) by ``scale``."""
    if isinstance(spec.get("num_requests"), int):
        spec["num_requests"] = max(1, math.ceil(spec["num_requests"] * scale))
    if isinstance(spec.get("duration_s"), int | float):
        spec["duration_s"] = spec["duration_s"] * scale


def _combinations(spec: SweepSpec) -> list[dict[str, Scalar]]:
    """Every grid cell as ``{path: value}``, first axis outermost."""
    dims: list[list[dict[str, Scalar]]] = [[{a.path: v} for v in a.values] for a in spec.axes]
    for group in spec.zip:
        dims.append([{a.path: a.values[i] for a in group} for i in range(len(group[0].values))])
    cells = []
    for combo in itertools.product(*dims):
        cell: dict[str, Scalar] = {}
        for part in combo:
            cell.update(part)
        cells.append(cell)
    return cells


def _point_hash(config: dict[str, Any]) -> str:
    text = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def expand_points(spec: SweepSpec, file: str, scale: float = 1.0) -> list[Point]:
    """All points of ``spec`` (read from ``file``) in grid order, seeds innermost."""
    root = Path(file).resolve().parent
    base = copy.deepcopy(spec.base)
    paths = spec.axis_paths()
    editable = scale != 1.0 or any(p.startswith("workload.") for p in paths)
    wl_name, wl_map = _base_workload(base.pop("workload", DEFAULT_WORKLOAD), root, file, editable)
    if wl_map is not None and not wl_map.get("name") and spec.name:
        wl_map["name"] = spec.name
    engine = base.pop("engine", None) or {}
    if not isinstance(engine, dict):
        raise SweepSpecError(f"{file}: base.engine: expected a mapping of engine arguments")
    base.setdefault("model", DEFAULT_MODEL)
    base.setdefault("gpu", DEFAULT_GPU)
    for key in ("model", "gpu"):
        if not isinstance(base[key], str):
            raise SweepSpecError(f"{file}: base.{key}: expected a name or a file path")
        if Path(base[key]).suffix:
            base[key] = _resolve_path(base[key], root)
    if base.get("calibration") is not None:
        base["calibration"] = _resolve_path(str(base["calibration"]), root)
    seeds: list[int | None] = list(spec.seeds) if spec.seeds else [base.pop("seed", None)]
    base.pop("seed", None)
    points: list[Point] = []
    for cell in _combinations(spec):
        run = {**copy.deepcopy(base), "engine": copy.deepcopy(engine), "workload": wl_name}
        workload = copy.deepcopy(wl_map)
        for path, value in cell.items():
            head, *rest = path.split(".")
            where = f"{file}: axis {path!r}"
            if head == "workload":
                set_path(workload, rest, value, where)
            elif head == "engine":
                set_path(run["engine"], rest, value, where)
            else:
                run[head] = value
        if workload is not None and scale != 1.0:
            scale_workload(workload, scale)
        for seed in seeds:
            index = len(points)
            config = {"run": run, "workload_spec": workload, "seed": seed}
            points.append(
                Point(
                    index=index,
                    point_id=_point_hash(config),
                    values=dict(cell),
                    seed=seed,
                    run={**copy.deepcopy(run), "seed": seed},
                    workload_spec=copy.deepcopy(workload),
                )
            )
    return points
