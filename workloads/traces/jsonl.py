"""Reading JSON Lines traces: validated in one pass over the file where every line is
valid, else line by line, so that the first bad line is named.

The one pass validates each line as a plain dict of the model's fields (a ``TypedDict``
made from the model: the same types, constraints and defaults, half the time of a
model instance per line), then the model's cross-field check on it; the line-by-line
read validates model instances. Either way the rows are the dicts of the model's
fields."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, TypeAdapter, ValidationError
from typing_extensions import NotRequired, TypedDict

from workloads.errors import WorkloadError, from_validation_error

M = TypeVar("M", bound=BaseModel)


def text_lines(path: Path, file: str) -> Iterator[tuple[int, str]]:
    """Yield ``(line number, text)`` for each line of a UTF-8 text file; a line that is
    not UTF-8 (a binary file) is a ``WorkloadError`` naming the file and the line."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise WorkloadError(file, "", f"cannot read trace: {exc.strerror}") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise WorkloadError(
                    file,
                    f"line {number}",
                    f"not UTF-8 text (byte {exc.start + 1} of the line is "
                    f"0x{raw[exc.start]:02x}); a trace must be a text file",
                ) from None


def iter_json_lines(path: Path, file: str) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` for each non-blank line of a JSONL file."""
    for number, line in text_lines(path, file):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(file, f"line {number}", f"not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise WorkloadError(file, f"line {number}", "each line must be a JSON object")
        yield number, obj


def validate_record(model: type[M], obj: dict, file: str, number: int) -> M:
    """Validate one record; a failure names the file, the line and the field."""
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise from_validation_error(exc, file, model, prefix=f"line {number}") from None


Row = dict[str, Any]
"""A validated trace line: the model's fields by name (defaults filled in)."""
RowCheck = Callable[[Row], Row]
"""A model's cross-field check on a row (its ``model_validator``'s, on a dict): returns
the row, raises ``ValueError`` when it is not valid."""


@cache
def _rows_of(model: type[BaseModel], check: RowCheck | None) -> TypeAdapter[list[Row]]:
    """Lists of ``model``'s lines as plain dicts: a ``TypedDict`` of its fields (each
    field's type with its ``FieldInfo``: constraints and default), its configuration but
    ``frozen``, and ``check`` after each."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        field = Annotated[info.annotation, info]
        fields[name] = field if info.is_required() else NotRequired[field]
    row: Any = TypedDict(f"{model.__name__}Row", fields)  # type: ignore[operator]
    config = {k: v for k, v in model.model_config.items() if k != "frozen"}
    row.__pydantic_config__ = ConfigDict(**config)  # type: ignore[typeddict-item]
    item = row if check is None else Annotated[row, AfterValidator(check)]
    return TypeAdapter(list[item])  # type: ignore[valid-type]


def _bulk(
    path: Path, model: type[BaseModel], check: RowCheck | None
) -> tuple[list[Row], list[int]] | None:
    """Every non-blank line of ``path`` validated as ``model``'s fields and ``check``
    in one call (pydantic's JSON parser over the lines joined as one array), with the
    lines' numbers; None when the file cannot be read or any line is not one valid
    record (the line-by-line read then names it). A line must give exactly one record:
    the counts must agree."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    numbers, lines = [], []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if raw.strip():
            numbers.append(number)
            lines.append(raw)
    try:
        rows = _rows_of(model, check).validate_json(b"[" + b",".join(lines) + b"]")
    except ValidationError:
        return None
    return (rows, numbers) if len(rows) == len(numbers) else None


def _line_by_line(path: Path, file: str, model: type[BaseModel]) -> tuple[list[Row], list[int]]:
    rows: list[Row] = []
    numbers: list[int] = []
    for number, obj in iter_json_lines(path, file):
        rows.append(dict(validate_record(model, obj, file, number)))
        numbers.append(number)
    return rows, numbers


def read_records(
    path: Path, file: str, model: type[BaseModel], check: RowCheck | None = None
) -> tuple[list[Row], list[str], list[int]]:
    """Every line of a JSONL trace validated as ``model`` (which has a ``request_id``),
    as the dicts of its fields (:data:`Row`), with each row's ``"line N"`` label and
    line number; a request id used twice is refused naming both lines, an empty file
    too. The file is validated in one pass (pydantic's JSON mode, which validates JSON
    values as its Python mode validates the objects ``json.loads`` gives), with
    ``check``: what the model's own cross-field validator checks, on a row; when any
    line is not one valid record it is read line by line as ``model`` instead, so the
    error names the line and field."""
    from workloads.traces.table import require_nonempty

    rows, numbers = _bulk(path, model, check) or _line_by_line(path, file, model)
    seen: dict[str, int] = {}
    for row, number in zip(rows, numbers):
        rid = row["request_id"]
        if rid in seen:
            raise WorkloadError(
                file, f"line {number}: request_id", f"{rid!r} already used on line {seen[rid]}"
            )
        seen[rid] = number
    require_nonempty(file, len(rows))
    return rows, [f"line {n}" for n in numbers], numbers
