"""The sweep spec (YAML, strict): a base run, axes over its fields, seeds.

Example::

    name: chat-qps
    base:
      workload: chat                # preset name, YAML path (relative to this file) or mapping
      model: Llama-3.1-8B
      gpu: H100-SXM
      engine: {max_model_len: 4096}
      steps: thin                   # each point's steps.csv: full | thin | none
    axes:                           # a grid: every combination, first axis outermost
      - {path: workload.arrival.rate, values: [2, 4, 8]}
    zip:                            # optional: each group is one more grid dimension whose
      - - {path: engine.num_gpu_blocks_override, values: [400, 800]}   # axes vary together
        - {path: engine.max_num_seqs, values: [32, 64]}
    seeds: [0, 1]                   # replications (innermost); omitted: the base seed
    length: {max_factor: 8}         # an undecided point runs again, 2x, up to 8x its length
    slo: {ttft_p90_s: 0.5}          # optional: the report names the best point meeting them

Paths are dotted: ``workload.<field...>``, ``engine.<EngineConfig field>`` or a top-level
run field (``model``, ``gpu``, ``calibration``, ``num_replicas``, ``router``, ``pd``,
``steps``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from sim.app.run import RunSpec
from sim.records.slo import SLO
from workloads.errors import WorkloadError, from_validation_error, yaml_problem

Scalar = bool | int | float | str | None


class SweepSpecError(ValueError):
    """A bad sweep spec; ``str(err)`` is one line ``FILE: FIELD: what is wrong``."""


class _Strict(BaseModel):
    """Strict values, as in workload YAML and traces: integers only where an integer is
    wanted (not ``"2"`` or ``2.0``), numbers (finite) where a float is."""

    model_config = ConfigDict(
        defer_build=True, extra="forbid", frozen=True, strict=True, allow_inf_nan=False
    )


class Axis(_Strict):
    """One swept field: a dotted ``path`` and the ``values`` it takes, in order."""

    path: str = Field(min_length=1)
    values: list[Scalar]

    @field_validator("values")
    @classmethod
    def _not_empty(cls, values: list[Scalar]) -> list[Scalar]:
        if not values:
            raise ValueError("empty axis: give at least one value")
        return values


def _value_key(value: Scalar) -> tuple[str, Scalar]:
    """Values that configure the same run compare equal (``2`` and ``2.0``); a bool is
    not a number here (``true`` is not ``1``)."""
    if isinstance(value, bool) or value is None:
        return ("const", value)
    if isinstance(value, int | float):
        return ("number", value)
    return ("str", value)


def _no_repeats(where: str, rows: list[tuple[Scalar, ...]]) -> None:
    """ValueError naming ``where`` and the first value (tuple) given twice: the same
    point would run twice under one point id."""
    first: dict[tuple[tuple[str, Scalar], ...], int] = {}
    for i, row in enumerate(rows):
        key = tuple(_value_key(v) for v in row)
        if key in first:
            shown = repr(row[0]) if len(row) == 1 else "(" + ", ".join(map(repr, row)) + ")"
            raise ValueError(
                f"{where}: value {shown} is given twice (entries {first[key] + 1} and "
                f"{i + 1}); {'each row of a zip group' if len(row) > 1 else 'every value'} "
                "must be distinct"
            )
        first[key] = i


class Length(_Strict):
    """How long a point runs: a point whose verdict is ``undecided`` (the engine still
    filling, or saturating slowly; ``sim.records.verdict``) is run again twice as long, with
    the same seed, up to ``max_factor`` times its workload's length (1: never)."""

    max_factor: int = Field(default=8, ge=1, le=1024)


class SweepSpec(_Strict):
    """A whole sweep: ``base`` run, grid ``axes``, ``zip`` groups, ``seeds`` and
    ``length``."""

    name: str | None = None
    description: str = ""
    base: dict[str, Any] = Field(default_factory=dict)
    axes: list[Axis] = Field(default_factory=list)
    zip: list[list[Axis]] = Field(default_factory=list)
    seeds: list[int] | None = None
    length: Length = Field(default_factory=Length)
    slo: SLO | None = None
    """Optional SLOs (``kvsim plan``'s names): the report marks the points that meet
    them and names the best one. They do not change what runs (nor the point ids)."""

    @model_validator(mode="after")
    def _consistent(self) -> SweepSpec:
        for g, group in enumerate(self.zip):
            if not group:
                raise ValueError(f"zip[{g}] is an empty group")
            lengths = {len(a.values) for a in group}
            if len(lengths) > 1:
                raise ValueError(
                    f"zip[{g}]: zipped axes need equal numbers of values "
                    f"(got {', '.join(f'{a.path}: {len(a.values)}' for a in group)})"
                )
        seen: set[str] = set()
        for axis in self.all_axes():
            if axis.path in seen:
                raise ValueError(f"axes: axis {axis.path!r} appears twice")
            seen.add(axis.path)
        for axis in self.axes:
            _no_repeats(f"axis {axis.path!r}", [(v,) for v in axis.values])
        for g, group in enumerate(self.zip):
            names = ", ".join(repr(a.path) for a in group)
            _no_repeats(f"zip[{g}] ({names})", list(zip(*(a.values for a in group))))
        if self.seeds is not None:
            if not self.seeds:
                raise ValueError("seeds: empty; give at least one seed or leave seeds out")
            if any(s < 0 for s in self.seeds):
                raise ValueError("seeds: every seed must be >= 0")
            if len(set(self.seeds)) != len(self.seeds):
                raise ValueError("seeds: has duplicates")
        return self

    def all_axes(self) -> list[Axis]:
        """Grid axes, then zipped axes, in spec order (the sweep.csv column order)."""
        return list(self.axes) + [a for group in self.zip for a in group]

    def axis_paths(self) -> list[str]:
        return [a.path for a in self.all_axes()]


def run_fields() -> list[str]:
    """The fields a sweep's ``base`` may set: this kvsim's ``RunSpec`` fields."""
    return [f.name for f in dataclasses.fields(RunSpec)]


def check_top_field(file: str, where: str, name: str) -> None:
    """Raise SweepSpecError unless ``name`` is a RunSpec field a sweep may set."""
    # A sweep sets the workload's rate and length as workload.<field> axes.
    allowed = [f for f in run_fields() if f not in ("decisions", "check", "workload_overrides")]
    if name in allowed:
        return
    raise SweepSpecError(f"{file}: {where}: unknown field {name!r} (allowed: {', '.join(allowed)})")


def _check_paths(spec: SweepSpec, file: str) -> None:
    """Top-level checks of each base key and axis path (deeper checks happen per point)."""
    for key in spec.base:
        check_top_field(file, f"base.{key}", key)
    for axis in spec.all_axes():
        where = f"axis {axis.path!r}"
        head, _, rest = axis.path.partition(".")
        if head == "seed":
            raise SweepSpecError(f"{file}: {where}: sweep seeds with 'seeds: [...]', not an axis")
        check_top_field(file, where, head)
        if head in ("workload", "engine"):
            if not rest:
                raise SweepSpecError(
                    f"{file}: {where}: name a field inside {head} (e.g. {head}.<field>)"
                )
        elif rest:
            raise SweepSpecError(f"{file}: {where}: {head!r} has no fields to go into")


def load_sweep_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep YAML (safe loading). SweepSpecError on bad input."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise SweepSpecError(f"{file}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise SweepSpecError(f"{file}: not UTF-8 text; a sweep spec is a YAML file") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SweepSpecError(str(WorkloadError(file, *yaml_problem(e)))) from None
    if not isinstance(data, dict):
        raise SweepSpecError(f"{file}: a sweep spec must be a YAML mapping (name, base, axes...)")
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as e:
        raise SweepSpecError(str(from_validation_error(e, file, SweepSpec))) from None
    _check_paths(spec, file)
    return spec
