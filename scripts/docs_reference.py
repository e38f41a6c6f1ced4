"""The field tables of docs/*.md, generated from kvsim's pydantic specs.

    python scripts/docs_reference.py           # rewrite every generated table in docs/
    python scripts/docs_reference.py --check   # exit 1 (naming the tables) when one is stale

A table sits in a page between ``<!-- fields: NAME -->`` and ``<!-- end fields -->``;
NAME is a key of :data:`TABLES`. Types, defaults and allowed values come from the spec
itself; what a field means comes from :data:`MEANING` (``scripts/docs_fields.yaml``),
which must hold every field of every table: a new spec field fails
``tests/test_docs.py`` until it is described there.
"""

from __future__ import annotations

import argparse
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from annotated_types import Ge, Gt, Le, Lt, MinLen
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sim.app.engine_config import EngineConfig  # noqa: E402
from sim.cli.options import DERIVED_DEFAULTS  # noqa: E402
from sim.plan.spec import SLO, PlanSpec, Search  # noqa: E402
from sim.plan.spec import Length as PlanLength  # noqa: E402
from sim.recommend import spec as rspec  # noqa: E402
from sim.sweep.spec import Axis, SweepSpec  # noqa: E402
from sim.sweep.spec import Length as SweepLength  # noqa: E402
from workloads import spec as wspec  # noqa: E402
from workloads import spec_arrivals as arr  # noqa: E402
from workloads import spec_bench as bench  # noqa: E402
from workloads import spec_lengths as lens  # noqa: E402
from workloads.traces.kvsim_jsonl import KvsimLine  # noqa: E402
from workloads.traces.mooncake import MooncakeLine  # noqa: E402

DOCS = REPO / "docs"

TABLES: dict[str, type[BaseModel]] = {
    "workload": wspec.WorkloadSpec,
    "poisson": arr.PoissonArrival,
    "gamma": arr.GammaArrival,
    "constant": arr.ConstantArrival,
    "piecewise": arr.PiecewiseArrival,
    "segment": arr.RateSegment,
    "burst": arr.BurstArrival,
    "closed_loop": arr.ClosedLoopArrival,
    "fixed": lens.FixedLength,
    "uniform": lens.UniformLength,
    "normal": lens.NormalLength,
    "lognormal": lens.LogNormalLength,
    "empirical": lens.EmpiricalLength,
    "shared_prefix": wspec.SharedPrefix,
    "zipf": wspec.ZipfPopularity,
    "sessions": wspec.Sessions,
    "priority": wspec.Priorities,
    "prompt_pool": bench.PromptPool,
    "pool_groups": bench.PoolGroups,
    "stage": bench.Stage,
    "engine": EngineConfig,
    "sweep": SweepSpec,
    "sweep_axis": Axis,
    "sweep_length": SweepLength,
    "plan": PlanSpec,
    "plan_slo": SLO,
    "plan_search": Search,
    "plan_length": PlanLength,
    "recommend": rspec.RecommendSpec,
    "recommend_space": rspec.Space,
    "recommend_search": rspec.Search,
    "recommend_verify": rspec.Verify,
    "kvsim_trace": KvsimLine,
    "mooncake_trace": MooncakeLine,
}
"""Each generated table's name and the spec it documents."""

LINKS: dict[type[BaseModel], str] = {
    wspec.SharedPrefix: "[shared_prefix](#shared_prefix)",
    wspec.Sessions: "[sessions](#sessions)",
    wspec.Priorities: "[priority](#priority)",
    bench.PromptPool: "[prompt_pool](#prompt_pool)",
    bench.PoolGroups: "[groups](#prompt_pool)",
    bench.Stage: "[stage](#stages)",
    arr.RateSegment: "[segments](#piecewise)",
    EngineConfig: "[engine](engine.md)",
    SLO: "[slo](#slo)",
    Search: "[search](#search)",
    PlanLength: "[length](#length)",
    SweepLength: "[length](#length)",
    Axis: "[axis](#axes)",
    rspec.Space: "[space](#space)",
    rspec.Search: "[search](#search)",
    rspec.Verify: "[verify](#verify)",
}
GROUPS: list[tuple[set[type[BaseModel]], str]] = [
    (set(typing.get_args(arr.OpenLoopArrival)) | {arr.ClosedLoopArrival}, "[arrival](#arrival)"),
    ({lens.FixedLength, lens.UniformLength, lens.NormalLength, lens.LogNormalLength,
      lens.EmpiricalLength}, "[length distribution](#lengths); an integer: fixed"),
    ({wspec.UniformPopularity, wspec.ZipfPopularity}, "`uniform` or [zipf](#shared_prefix)"),
]  # fmt: skip

MEANING: dict[str, str] = yaml.safe_load(
    (Path(__file__).with_name("docs_fields.yaml")).read_text(encoding="utf-8")
)
"""What each field means (``scripts/docs_fields.yaml``), keyed ``Model.field``, or
``table.field`` where two specs share a class name (the plan's and the sweep's
``Length``)."""


def _unwrap(annotation: Any) -> list[Any]:
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [c for arg in get_args(annotation) for c in _unwrap(arg)]
    return [annotation]


PLURAL = {"integer": "integers", "number": "numbers", "string": "strings", "boolean": "booleans"}


def type_label(annotation: Any) -> str:
    """A field's type in words: ``integer``, ``number``, ``list of integers``, a link."""
    parts = [a for a in _unwrap(annotation) if a is not type(None)]
    models = {p for p in parts if isinstance(p, type) and issubclass(p, BaseModel)}
    if len(models) > 1:
        for group, label in GROUPS:
            if models <= group:
                return label
    if len(models) == 1 and len(parts) == 1:
        return LINKS.get(next(iter(models)), "mapping")
    labels = []
    for p in parts:
        if get_origin(p) is Literal:
            values = get_args(p)
            return (
                f"`{values[0]}`"
                if len(values) == 1
                else "one of " + ", ".join(f"`{v}`" for v in values)
            )
        if get_origin(p) is list:
            (inner,) = get_args(p)
            label = type_label(inner)
            labels.append(f"list of {PLURAL.get(label, label)}")
        elif get_origin(p) is dict:
            labels.append("mapping")
        elif p is bool:
            labels.append("boolean")
        elif p is int:
            labels.append("integer")
        elif p is float:
            labels.append("number")
        elif p is str:
            labels.append("string")
        else:
            labels.append(getattr(p, "__name__", str(p)))
    return " or ".join(dict.fromkeys(labels))


def _yaml(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, BaseModel):
        tag = getattr(value, "type", None)
        return f"`{tag}`" if isinstance(tag, str) else "the defaults below"
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    if isinstance(value, list | dict):
        return f"`{value}`".replace("'", "")
    return f"`{value}`"


TYPE_TEXT = {
    "sweep_axis.values": "list of scalars (boolean, integer, number, string)",
    "sweep.slo": "[slo](plan.md#slo)",
}
"""Types said in words where the spec's annotation reads badly."""
DEFAULT_TEXT = {
    **{f"engine.{k}": v for k, v in DERIVED_DEFAULTS.items()},
    "plan.engine": "vLLM's defaults (the engine page)",
    "workload.arrival": "required without `stages`",
    "recommend.engine": "vLLM's defaults (the engine page)",
}
"""Defaults said in words: what a ``None`` resolves to."""


def default_label(field: Any) -> str:
    """``required``, or the default as YAML would write it."""
    if field.default_factory is not None:
        return _yaml(field.default_factory())
    if field.default is PydanticUndefined:
        return "required"
    return _yaml(field.default)


def bounds_label(field: Any) -> str:
    """Allowed values from the field's constraints (``> 0``, ``>= 1``, ``at least 1``)."""
    out = []
    for m in field.metadata:
        if isinstance(m, Gt):
            out.append(f"> {m.gt}")
        elif isinstance(m, Ge):
            out.append(f">= {m.ge}")
        elif isinstance(m, Lt):
            out.append(f"< {m.lt}")
        elif isinstance(m, Le):
            out.append(f"<= {m.le}")
        elif isinstance(m, MinLen) and m.min_length:
            out.append(f"at least {m.min_length}")
    return ", ".join(out)


def table(name: str) -> str:
    """The markdown table of :data:`TABLES` entry ``name``; KeyError names a field
    without a meaning in :data:`MEANING`."""
    model = TABLES[name]
    rows = ["| field | type | default | allowed | meaning |", "| --- | --- | --- | --- | --- |"]
    for field_name, field in model.model_fields.items():
        key = f"{name}.{field_name}"  # a table's own entry first (two specs are "Length")
        if key not in MEANING:
            key = f"{model.__name__}.{field_name}"
        if key not in MEANING:
            raise KeyError(f"scripts/docs_reference.py: MEANING has no entry for {key}")
        where = f"{name}.{field_name}"
        cells = [
            f"`{field_name}`",
            TYPE_TEXT.get(where) or type_label(field.annotation),
            DEFAULT_TEXT.get(where) or default_label(field),
            bounds_label(field),
            MEANING[key],
        ]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


BLOCK = re.compile(r"(<!-- fields: (\w+) -->\n)(.*?)(<!-- end fields -->)", re.S)


def render(text: str) -> str:
    """``text`` with every generated table rewritten."""
    return BLOCK.sub(lambda m: m.group(1) + table(m.group(2)) + "\n" + m.group(4), text)


def stale_pages() -> list[str]:
    """The docs pages whose generated tables differ from the specs."""
    return [
        str(p.relative_to(REPO))
        for p in sorted(DOCS.glob("*.md"))
        if render(p.read_text(encoding="utf-8")) != p.read_text(encoding="utf-8")
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale pages")
    args = parser.parse_args(argv)
    stale = stale_pages()
    if args.check:
        for page in stale:
            print(f"{page}: generated tables are stale; run python scripts/docs_reference.py")
        return 1 if stale else 0
    for page in stale:
        path = REPO / page
        path.write_text(render(path.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"rewrote {page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
