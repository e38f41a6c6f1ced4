"""Reading JSON Lines traces one validated record at a time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

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


def read_records(path: Path, file: str, model: type[M]) -> tuple[list[M], list[str], list[int]]:
    """Every line of a JSONL trace validated as ``model`` (which has a ``request_id``),
    with each row's ``"line N"`` label and line number; a request id used twice is
    refused naming both lines, an empty file too."""
    from workloads.errors import WorkloadError
    from workloads.traces.table import require_nonempty

    rows: list[M] = []
    lines: list[str] = []
    numbers: list[int] = []
    seen: dict[str, int] = {}
    for number, obj in iter_json_lines(path, file):
        row = validate_record(model, obj, file, number)
        rid = row.request_id  # type: ignore[attr-defined]
        if rid in seen:
            raise WorkloadError(
                file, f"line {number}: request_id", f"{rid!r} already used on line {seen[rid]}"
            )
        seen[rid] = number
        rows.append(row)
        lines.append(f"line {number}")
        numbers.append(number)
    require_nonempty(file, len(rows))
    return rows, lines, numbers
