"""Step-indexed replay traces: loading and validation.

A trace is a JSON list of ``{request_id, arrival_step, prompt_token_ids, max_tokens}``
objects with optional ``priority``, ``cache_salt``, ``lora_id``, ``abort_step`` and
``abort_in_step``; a request is added before the ``schedule()`` call of step
``arrival_step``. The engine aborts a request (vLLM's ``EngineCore.abort_requests``,
as for a client that went away) after the adds of step ``abort_step``, before its
``schedule()`` (vLLM's input queue), or while step ``abort_in_step`` runs: after its
``schedule()``, before the output it applies (vLLM's aborts queue). Both are at least
``arrival_step``; a request already finished is left alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class TraceError(ValueError):
    """A trace that cannot be replayed; the message names the file, request and field."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    request_id: str
    arrival_step: int
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    priority: int = 0
    cache_salt: str | None = None
    lora_id: int | None = None
    abort_step: int | None = None
    abort_in_step: int | None = None


_REQUIRED = ("request_id", "arrival_step", "prompt_token_ids", "max_tokens")
_OPTIONAL = ("priority", "cache_salt", "lora_id", "abort_step", "abort_in_step")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_trace(data: Any, source: str = "trace") -> list[TraceRequest]:
    """Validate a decoded trace; raise :class:`TraceError` on the first problem."""
    if not isinstance(data, list):
        raise TraceError(f"{source}: expected a JSON list of requests, got {type(data).__name__}")
    out: list[TraceRequest] = []
    seen: set[str] = set()
    for i, item in enumerate(data):
        rid = _checked_id(item, f"{source}: request #{i}")
        where = f"{source}: request #{i} ({rid})"
        if rid in seen:
            raise TraceError(f"{where}: duplicate request_id")
        seen.add(rid)
        out.append(_parse_request(item, rid, where))
    return out


def _checked_id(item: Any, where: str) -> str:
    """The request id of trace entry ``item``, once its fields are known and the
    required ones present."""
    if not isinstance(item, dict):
        raise TraceError(f"{where}: expected an object, got {type(item).__name__}")
    unknown = set(item) - set(_REQUIRED) - set(_OPTIONAL)
    if unknown:
        raise TraceError(
            f"{where}: unknown field(s) {sorted(unknown)}; allowed: "
            f"{', '.join(_REQUIRED + _OPTIONAL)}"
        )
    for key in _REQUIRED:
        if key not in item:
            raise TraceError(f"{where}: missing required field '{key}'")
    rid = item["request_id"]
    if not isinstance(rid, str) or not rid:
        raise TraceError(f"{where}: field 'request_id' must be a non-empty string, got {rid!r}")
    return rid


def _parse_request(item: dict[str, Any], rid: str, where: str) -> TraceRequest:
    """The request of trace entry ``item`` (id ``rid``), its fields checked."""
    step = item["arrival_step"]
    if not _is_int(step) or step < 0:
        raise TraceError(f"{where}: field 'arrival_step' must be an integer >= 0, got {step!r}")
    prompt = item["prompt_token_ids"]
    if not isinstance(prompt, list) or not prompt or not all(_is_int(t) and t >= 0 for t in prompt):
        raise TraceError(
            f"{where}: field 'prompt_token_ids' must be a non-empty list of integers >= 0"
        )
    max_tokens = item["max_tokens"]
    if not _is_int(max_tokens) or max_tokens < 1:
        raise TraceError(f"{where}: field 'max_tokens' must be an integer >= 1, got {max_tokens!r}")
    priority = item.get("priority", 0)
    if not _is_int(priority):
        raise TraceError(f"{where}: field 'priority' must be an integer, got {priority!r}")
    salt = item.get("cache_salt")
    if salt is not None and not isinstance(salt, str):
        raise TraceError(f"{where}: field 'cache_salt' must be a string, got {salt!r}")
    lora_id = item.get("lora_id")
    if lora_id is not None and (not _is_int(lora_id) or lora_id < 1):
        raise TraceError(f"{where}: field 'lora_id' must be an integer >= 1, got {lora_id!r}")
    aborts = []
    for key in ("abort_step", "abort_in_step"):
        abort = item.get(key)
        if abort is not None and (not _is_int(abort) or abort < step):
            raise TraceError(
                f"{where}: field '{key}' must be an integer >= arrival_step ({step}), got {abort!r}"
            )
        aborts.append(abort)
    return TraceRequest(rid, step, tuple(prompt), max_tokens, priority, salt, lora_id, *aborts)


def load_trace(path: str | Path) -> list[TraceRequest]:
    """Read and validate a replay trace file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise TraceError(f"{path}: cannot read trace: {e.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(
            f"{path}: not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}"
        ) from None
    return parse_trace(data, str(path))
