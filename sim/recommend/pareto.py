"""The Pareto frontier of tokens per second per user against tokens per second per GPU.

Every point is a simulated configuration that met the SLOs: a candidate at one probed
rate (its plan probes that passed, :mod:`sim.recommend.evaluate`). A point is on the
frontier when no other point has at least its throughput per GPU and at least its
speed per user with one of them larger. Sorted by throughput per GPU, the frontier's
speed per user strictly falls: it is monotone.
"""

from __future__ import annotations

from typing import Any

Point = dict[str, Any]
X = "tokens_per_s_per_gpu"
Y = "tokens_per_s_per_user"


def frontier(points: list[Point]) -> list[Point]:
    """The frontier of ``points`` (each with :data:`X` and :data:`Y`), by rising
    :data:`X`; points without a :data:`Y` are left out."""
    usable = [p for p in points if p.get(Y) is not None and p.get(X) is not None]
    ordered = sorted(usable, key=lambda p: (-p[X], -p[Y], p.get("key", ""), p.get("rate", 0)))
    out: list[Point] = []
    best_y = float("-inf")
    for p in ordered:
        if p[Y] > best_y:
            out.append(p)
            best_y = p[Y]
    return out[::-1]
