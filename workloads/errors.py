"""The one exception type of the workloads package and pydantic error formatting.

Every bad input (a YAML spec, a preset name, a trace file) ends in a
``WorkloadError`` whose message is a single line ``FILE: FIELD: what is wrong``,
so the CLI can print it and exit 2 without a traceback.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ValidationError


class WorkloadError(ValueError):
    """Bad workload input. ``str(err)`` is ``"<file>: <field>: <message>"``.

    Attributes:
        file: the file (or preset name) that holds the bad input.
        field: dotted field path (``arrival.rate``) or a trace location
            (``line 3: arrival_s``); empty when the whole file is at fault.
        reason: what is wrong, with the allowed values where there is a fixed set.
    """

    def __init__(self, file: str, field: str, reason: str) -> None:
        self.file = str(file)
        self.field = field
        self.reason = reason
        where = f"{self.file}: {field}: " if field else f"{self.file}: "
        super().__init__(where + reason)


def yaml_problem(exc: Exception) -> tuple[str, str]:
    """``(where, what)`` of a YAML parse error: ``"line N"`` (empty when PyYAML gives no
    position) and ``"YAML syntax error: <problem>"``, for one-line messages naming the
    file's line."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}" if mark is not None else ""
    return where, f"YAML syntax error: {getattr(exc, 'problem', None) or 'unreadable'}"


def _unwrap(annotation: Any) -> list[Any]:
    """The concrete classes an annotation may hold (Optional, Annotated, unions, lists)."""
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [c for arg in get_args(annotation) for c in _unwrap(arg)]
    if origin in (list, tuple):
        return [c for arg in get_args(annotation) for c in _unwrap(arg)]
    return [annotation]


def _tag_of(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("type")
    if field is None or get_origin(field.annotation) is not Literal:
        return None
    return get_args(field.annotation)[0]


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    return [c for c in _unwrap(annotation) if isinstance(c, type) and issubclass(c, BaseModel)]


def _walk(root: type[BaseModel], loc: tuple[Any, ...]) -> tuple[list[type[BaseModel]], list[str]]:
    """Follow ``loc`` from ``root``; return the models it may reach and the loc without
    union tags.

    pydantic puts the tag of a discriminated union into ``loc``
    (``prompt_len.lognormal.sigma``); the user wrote ``prompt_len.sigma``.
    """
    candidates: list[type[BaseModel]] = [root]
    clean: list[str] = []
    for item in loc:
        if isinstance(item, int):
            clean.append(f"[{item}]")
            continue
        tagged = [m for m in candidates if len(candidates) > 1 and _tag_of(m) == item]
        if tagged:
            candidates = tagged
            continue
        owner = next((m for m in candidates if item in m.model_fields), None)
        clean.append(str(item))
        candidates = _models_in(owner.model_fields[item].annotation) if owner else []
    return candidates, clean


def _join(parts: list[str]) -> str:
    out = ""
    for part in parts:
        out += part if part.startswith("[") or not out else "." + part
    return out


def _reason(err: dict[str, Any], models: list[type[BaseModel]]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    got = err.get("input")
    shown = "" if isinstance(got, dict | list) else f" (got {got!r})"
    if kind == "extra_forbidden":
        allowed = ", ".join(models[0].model_fields) if len(models) == 1 else ""
        return "unknown key" + (f" (allowed: {allowed})" if allowed else "")
    if kind == "missing":
        return "required field is missing"
    bounds = {
        "greater_than": ">",
        "greater_than_equal": ">=",
        "less_than": "<",
        "less_than_equal": "<=",
    }
    if kind in bounds:
        limit = next(iter(ctx.values()), "")
        if isinstance(limit, float) and limit.is_integer():
            limit = int(limit)
        return f"must be {bounds[kind]} {limit}{shown}"
    if kind == "finite_number":
        return f"must be a finite number{shown}"
    if kind in ("int_type", "int_from_float", "int_parsing"):
        return f"must be an integer, not {type(got).__name__}{shown}"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number, not {type(got).__name__}{shown}"
    if kind == "union_tag_invalid":
        return (
            f"unknown type {ctx.get('tag')!r} "
            f"(allowed: {ctx.get('expected_tags', '').replace(chr(39), '')})"
        )
    if kind == "union_tag_not_found":
        tags = ", ".join(t for t in (_tag_of(m) for m in models) if t)
        return "missing 'type' key" + (f" (allowed: {tags})" if tags else "")
    message = err["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    return message + ("" if "(got " in message else shown)  # a validator may say it already


def from_validation_error(
    exc: ValidationError, file: str, root: type[BaseModel], prefix: str = ""
) -> WorkloadError:
    """Turn pydantic's first error into one ``WorkloadError`` line naming file and field."""
    err = exc.errors(include_url=False)[0]
    loc = tuple(err["loc"])
    if err["type"] == "extra_forbidden":
        models, clean = _walk(root, loc[:-1])
        clean = clean + [str(loc[-1])]
    else:
        models, clean = _walk(root, loc)
    field = ": ".join(part for part in (prefix, _join(clean)) if part)
    return WorkloadError(file, field, _reason(err, models))
