"""Line-by-line comparison of kvcore's and vLLM's JSON lines (steps, ops, sizing).

Each ``first_*_diff`` returns ``None`` when both sides agree, else a :class:`Diff`
naming where they first part and holding only the fields that differ on each side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

TIMING_KEYS = ("build_s", "wall_s", "sched_loop_s", "steps_per_s")
SIZING_KEYS = ("num_blocks", "groups", "kv_cache_tensors")


@dataclass
class Diff:
    """The first disagreement: where, and the differing fields of each side."""

    where: str
    vllm: dict[str, Any]
    kvcore: dict[str, Any]

    def render(self, width: int = 600) -> str:
        """Two lines, one per side, each cut to ``width`` characters."""
        left = _cut(json.dumps(self.vllm, sort_keys=True), width)
        right = _cut(json.dumps(self.kvcore, sort_keys=True), width)
        return f"{self.where}\n  vllm  : {left}\n  kvcore: {right}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _scheduled_diff(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> tuple[Any, Any]:
    """Only the scheduled entries (by request id, in order) that differ."""
    if [e["id"] for e in a] != [e["id"] for e in b]:
        return [e["id"] for e in a], [e["id"] for e in b]
    left, right = [], []
    for ea, eb in zip(a, b):
        if ea != eb:
            keys = sorted(set(ea) | set(eb))
            diff = [k for k in keys if ea.get(k) != eb.get(k)]
            left.append({"id": ea["id"], **{k: ea.get(k) for k in diff}})
            right.append({"id": eb["id"], **{k: eb.get(k) for k in diff}})
    return left, right


def field_diff(vllm: dict[str, Any], kvcore: dict[str, Any]) -> tuple[dict, dict]:
    """The fields whose values differ, per side (``scheduled`` narrowed per request)."""
    left: dict[str, Any] = {}
    right: dict[str, Any] = {}
    for key in sorted(set(vllm) | set(kvcore)):
        a, b = vllm.get(key), kvcore.get(key)
        if a == b:
            continue
        if key == "scheduled" and isinstance(a, list) and isinstance(b, list):
            a, b = _scheduled_diff(a, b)
        left[key], right[key] = a, b
    return left, right


def _strip_timing(line: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in line.items() if k not in TIMING_KEYS}


def first_line_diff(
    vllm: list[dict[str, Any]], kvcore: list[dict[str, Any]], kind: str, label: str
) -> Diff | None:
    """First differing ``kind`` line (``step`` / ``op``), then count, then summary."""
    ours = [x for x in kvcore if x.get("type") == kind]
    theirs = [x for x in vllm if x.get("type") == kind]
    for a, b in zip(theirs, ours):
        if a != b:
            left, right = field_diff(a, b)
            where = f"{kind} {a.get(label)}"
            if kind == "op":
                where += f" ({a.get('op')} {a.get('request_id', '')})".rstrip()
            return Diff(where, left, right)
    if len(ours) != len(theirs):
        return Diff(f"number of {kind} lines", {kind + "s": len(theirs)}, {kind + "s": len(ours)})
    sa = _strip_timing(next((x for x in vllm if x.get("type") == "summary"), {}))
    sb = _strip_timing(next((x for x in kvcore if x.get("type") == "summary"), {}))
    if sa != sb:
        return Diff("summary", *field_diff(sa, sb))
    return None


def first_sizing_diff(vllm: dict[str, Any] | None, kvcore: dict[str, Any] | None) -> Diff | None:
    """Compare num_blocks, groups and tensors (``None`` = the side refused the case)."""
    a = {k: vllm[k] for k in SIZING_KEYS} if vllm is not None else {"error": True}
    b = {k: kvcore[k] for k in SIZING_KEYS} if kvcore is not None else {"error": True}
    if a == b:
        return None
    return Diff("sizing", *field_diff(a, b))


def compare_case(
    vllm_lines: list[dict[str, Any]], kvcore_lines: list[dict[str, Any]]
) -> Diff | None:
    """The first disagreement of one connector case (an error line on either side, the
    header, then the step lines up to the summary): the offload and P/D comparisons."""
    if vllm_lines and vllm_lines[0].get("type") == "error":
        return Diff("oracle error", vllm_lines[0], {})
    if kvcore_lines and kvcore_lines[0].get("type") == "error":
        return Diff("kvcore error", {}, kvcore_lines[0])
    if vllm_lines[:1] != kvcore_lines[:1]:
        return Diff("header", vllm_lines[0], kvcore_lines[0])
    return first_line_diff(vllm_lines, kvcore_lines, "step", "step")
