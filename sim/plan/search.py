"""Bisection over one monotone parameter, and the answer with its uncertainty.

``want="max"``: the SLOs hold below some boundary (request rate, max_num_seqs) and
the answer is the highest passing value. ``want="min"``: they hold above it (replica
count, KV blocks, gpu_memory_utilization) and the answer is the lowest passing value.
Rates bisect geometrically, other parameters arithmetically (integers on integers);
the search stops once the bracket is at most ``rel_tol`` of its larger end wide, or
(integers) its ends are adjacent.

Outcomes (``status``): ``bracketed`` (a passing and a failing probe within the
tolerance), ``at_bound`` (every probe up to the search limit passed, so the answer is
the limit and the true boundary lies beyond it), ``infeasible`` (no probed value
passes), ``max_probes`` (stopped by the probe budget while the bracket is still wider
than the tolerance).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Probe = Callable[[float], bool]
EXPAND_LIMIT = 4096.0
"""How far (as a multiple of ``low``) an open-ended search doubles before stopping."""


def within_tolerance(a: float, b: float, rel_tol: float, integer: bool) -> bool:
    """True when the bracket ``[a, b]`` (either order) is narrow enough to stop: at most
    ``rel_tol`` of its larger end wide, or (integers) adjacent values."""
    width = abs(b - a)
    return width <= rel_tol * max(abs(a), abs(b)) or (integer and width <= 1)


@dataclass
class SearchResult:
    """Where the boundary lies: ``last_pass`` and ``first_fail`` bracket it."""

    status: str
    answer: float | None
    last_pass: float | None
    first_fail: float | None
    num_probes: int


@dataclass
class Bisection:
    """Search settings; ``probe(value)`` runs all seeds and returns True on a pass."""

    probe: Probe
    want: Literal["max", "min"]
    integer: bool
    geometric: bool
    rel_tol: float
    max_probes: int
    num_probes: int = 0

    def _try(self, x: float) -> bool:
        self.num_probes += 1
        return self.probe(x)

    def _mid(self, a: float, b: float) -> float:
        if self.integer:
            return float((int(a) + int(b)) // 2)
        return math.sqrt(a * b) if self.geometric else (a + b) / 2

    def _close(self, a: float, b: float) -> bool:
        return within_tolerance(a, b, self.rel_tol, self.integer)

    def _grow(self, x: float) -> float:
        return float(max(int(x) + 1, int(x) * 2)) if self.integer else x * 2

    def run(self, low: float, high: float | None) -> SearchResult:
        """Bracket, then bisect until close or out of probes."""
        limit = low * EXPAND_LIMIT if high is None else high
        if self.want == "max":
            if not self._try(low):
                return self._result("infeasible", None, low)
            good = low
            if high is not None:
                if self._try(high):
                    return self._result("at_bound", high, None)
                bad = high
            else:
                bad = None
                while bad is None:
                    nxt = self._grow(good)
                    if nxt > limit or self.num_probes >= self.max_probes:
                        return self._result("at_bound", good, None)
                    if self._try(nxt):
                        good = nxt
                    else:
                        bad = nxt
        else:
            if high is not None:
                if not self._try(high):
                    return self._result("infeasible", None, high)
                good = high
                if self._try(low):
                    return self._result("at_bound", low, None)
                bad = low
            else:
                if self._try(low):
                    return self._result("at_bound", low, None)
                bad, good = low, None
                while good is None:
                    nxt = self._grow(bad)
                    if nxt > limit or self.num_probes >= self.max_probes:
                        return self._result("infeasible", None, bad)
                    if self._try(nxt):
                        good = nxt
                    else:
                        bad = nxt
        return self.narrow(good, bad)

    def narrow(self, good: float, bad: float, max_probes: int | None = None) -> SearchResult:
        """Bisect between a passing ``good`` and a failing ``bad`` until close or out
        of probes (``max_probes``, the search's own budget by default)."""
        limit = self.max_probes if max_probes is None else max_probes
        while not self._close(good, bad):
            if self.num_probes >= limit:
                return self._result("max_probes", good, bad)
            mid = self._mid(good, bad)
            if mid in (good, bad):
                break
            if self._try(mid):
                good = mid
            else:
                bad = mid
        return self._result("bracketed", good, bad)

    def bisections_needed(self, a: float, b: float) -> int:
        """How many bisections bring the bracket ``[a, b]`` within the tolerance."""
        needed = 0
        while not self._close(a, b) and needed < 64:
            mid = self._mid(a, b)
            if mid in (a, b):
                break
            a, needed = mid, needed + 1  # the wider half, on either side, is the same
        return needed

    def resume_below(self, failed: float, passed: list[float]) -> SearchResult:
        """Search again after ``failed``, once the answer, failed its confirmation:
        between it and the nearest value in ``passed`` on the passing side (below for
        ``max``, above for ``min``); ``infeasible`` when there is none. The budget
        grows by the bisections that bracket needs: a confirmation that fails late in
        the search still narrows the answer to the tolerance."""
        if self.want == "max":
            side = [v for v in passed if v < failed]
            good = max(side) if side else None
        else:
            side = [v for v in passed if v > failed]
            good = min(side) if side else None
        if good is None:
            return self._result("infeasible", None, failed)
        budget = max(self.max_probes, self.num_probes + self.bisections_needed(good, failed))
        return self.narrow(good, failed, budget)

    def _result(self, status: str, good: float | None, bad: float | None) -> SearchResult:
        return SearchResult(status, good, good, bad, self.num_probes)


def seed_answers(probes: list[dict[str, Any]], want: str) -> dict[int, float | None]:
    """Each seed's own answer from the probes: the best value it passed with no
    failure of that seed on the near side (below for ``max``, above for ``min``)."""
    ordered = sorted(probes, key=lambda p: p["value"], reverse=(want == "min"))
    seeds = [s["seed"] for s in ordered[0]["seeds"]] if ordered else []
    out: dict[int, float | None] = {}
    for i, seed in enumerate(seeds):
        best = None
        for p in ordered:
            if not p["seeds"][i]["passed"]:
                break
            best = p["value"]
        out[seed] = best
    return out
