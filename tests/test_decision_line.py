"""``decisions.jsonl`` has one line format: a step's line is ``json.dumps`` of its
dict, and a fast-forwarded stretch's lines are those of its steps. (That stepped and
fast-forwarded runs write the same ``decisions.jsonl`` bytes is
tests/test_fast_forward.py's.)"""

from __future__ import annotations

import json

from sim.records.decision_line import decision_line, decode_decision_lines


def test_decision_lines_are_json_dumps() -> None:
    scheduled = {"b": 3, "a": 1, "é": 2}
    line = decision_line(1, 5, scheduled, {"z", "y"}, ["a"], 17)
    expected = {
        "replica": 1,
        "step": 5,
        "scheduled": scheduled,
        "preempted": ["y", "z"],
        "finished": ["a"],
        "num_free_blocks": 17,
    }
    assert line == json.dumps(expected) + "\n"
    ids = ["r1", "r0", 'x"y']
    bulk = decode_decision_lines(2, 10, ids, [5, 4, 3], ["r0"])
    one = dict.fromkeys(ids, 1)
    assert bulk == "".join(
        decision_line(2, 10 + j, one, [], ["r0"] if j == 2 else [], 5 - j) for j in range(3)
    )
