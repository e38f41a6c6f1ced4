"""``decisions.jsonl``'s lines (``--decisions``): what each step scheduled.

One JSON object per step and line (docs/outputs.md): ``replica``, ``step``,
``scheduled`` (request id -> tokens, in scheduling order), ``preempted`` (ids, sorted),
``finished`` (ids, in the order the step finished them), ``num_free_blocks`` (after
the step); the bytes of ``json.dumps`` of that dict. :func:`decision_line` writes one
step's; :func:`decode_decision_lines` those of a stretch of decode-only steps, in bulk
(fast-forward), from the same template.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

_LINE = (
    '{"replica": %d, "step": %d, "scheduled": %s, "preempted": %s, "finished": %s, '
    '"num_free_blocks": %d}\n'
)


def decision_line(
    replica: int,
    step: int,
    scheduled: Mapping[str, int],
    preempted: Iterable[str],
    finished: Sequence[str],
    num_free_blocks: int,
) -> str:
    """The line of step ``step`` of ``replica``: ``scheduled`` tokens per request,
    the ids ``preempted`` in it (written sorted) and ``finished`` in it, the free
    blocks after it."""
    return _LINE % (
        replica,
        step,
        json.dumps(scheduled),
        json.dumps(sorted(preempted)),
        json.dumps(finished),
        num_free_blocks,
    )


def decode_decision_lines(
    replica: int,
    step0: int,
    request_ids: Sequence[str],
    num_free_blocks: Sequence[int],
    finished: Sequence[str],
) -> str:
    """The lines of decode-only steps ``step0, step0 + 1, ...`` of ``replica``, one
    per value of ``num_free_blocks``: each schedules one token for each of
    ``request_ids`` and preempts none; ``finished`` finish in the last, none before.
    What :func:`decision_line` writes for each, computed once."""
    scheduled = json.dumps(dict.fromkeys(request_ids, 1))
    k = len(num_free_blocks)
    lines = [
        _LINE % (replica, step0 + j, scheduled, "[]", "[]", num_free_blocks[j])
        for j in range(k - 1)
    ]
    if k:
        last = json.dumps(list(finished))
        lines.append(_LINE % (replica, step0 + k - 1, scheduled, "[]", last, num_free_blocks[-1]))
    return "".join(lines)
