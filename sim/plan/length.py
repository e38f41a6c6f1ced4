"""How long a probe's runs are: lengthened until the answer does not depend on it.

A sequential procedure (the "relative precision" stopping rule of simulation output
analysis; Law & Kelton, *Simulation Modeling and Analysis*, 5th ed., ch. 9.4.1): a
seed's run starts at the plan's length (``num_requests``, or the workload's own
``num_requests`` / ``duration_s``) and is run again twice as long, with the same seed
(request ``i`` is the same request at every length), while it cannot decide:

- its verdict is ``undecided`` (the number in system still rises; ``sim.records.verdict``), or
- an SLO metric has no 95% interval yet (the window is too short: a p99 needs 5,000
  requests), or its interval contains the SLO bound and is wider than ``precision``
  (half-width over the value).

It stops as soon as the run is saturated, every SLO's interval lies on one side of its
bound (or is narrower than ``precision``), or one SLO fails decidedly; and at
``max_factor`` times the start, where it says so: a seed whose verdict is still
undecided there must clear every SLO bound by ``precision``
(:func:`sim.plan.judge.judge_summary`), one whose SLO interval is still wide is
judged on the point value.
With ``fixed`` the start length is the only length (a note where an interval is wider
than ``precision``).

Near capacity a configuration can look steady over a short run and still saturate
later: the number in system drifts up slowly and a large excursion, once it comes,
does not recover (critical slowing down: the relaxation time grows without bound as
the load approaches capacity). A trend test cannot see an excursion that has not yet
happened, so the search's answer is **confirmed** (:func:`confirm_factor`): each seed
of the answer probe runs again until its measurement window spans at least
``confirm_sojourns`` (50) mean sojourn times (window duration over the window's mean
E2E latency), up to ``max_factor``. A seed that then fails makes the probe a failure
and the search continues below it (:meth:`sim.plan.search.Bisection.resume_below`).
"""

from __future__ import annotations

import math
from typing import Any

from sim.records.verdict import UNDECIDED


def undecided_slos(judged: dict[str, Any], bounds: dict[str, float], precision: float) -> list[str]:
    """The SLOs a judged seed (``sim.plan.judge.judge_summary``) cannot decide yet:
    no interval, or one that straddles the bound and is wider than ``precision``."""
    metrics = judged.get("metrics")
    intervals = judged.get("intervals") or {}
    if metrics is None:  # saturated or failed: decided
        return []
    open_slos = []
    for key, bound in bounds.items():
        if key == "max_preemptions_per_request":
            continue  # a count per request: decided on its value
        ci = intervals.get(key)
        value = metrics[key]
        wide = ci is not None and (ci[1] - ci[0]) / 2 > precision * abs(value)
        if ci is None or (wide and ci[0] <= bound <= ci[1]):
            open_slos.append(key)
    return open_slos


def decided_fail(judged: dict[str, Any], bounds: dict[str, float]) -> bool:
    """An SLO fails with its whole interval above the bound (or the run failed or
    saturated): more length cannot make the seed pass."""
    if judged.get("state") not in ("steady", UNDECIDED):
        return True
    metrics = judged.get("metrics")
    if metrics is None:
        return False
    intervals = judged.get("intervals") or {}
    for key, bound in bounds.items():
        ci = intervals.get(key)
        if ci is not None and ci[0] > bound:
            return True
        if key == "max_preemptions_per_request" and metrics[key] > bound:
            return True
    return False


def needs_longer(judged: dict[str, Any], bounds: dict[str, float], precision: float) -> list[str]:
    """Why a seed's run should be run longer (empty: it is decided)."""
    if decided_fail(judged, bounds):
        return []
    why = []
    if judged.get("state") == UNDECIDED:
        why.append("verdict undecided")
    why += [f"{k} interval" for k in undecided_slos(judged, bounds, precision)]
    return why


def confirm_factor(
    sojourns: float | None, factor: int, confirm_sojourns: float, max_factor: int
) -> int:
    """The length factor (a power of two times ``factor``, at most ``max_factor``) at
    which a seed's window spans ``confirm_sojourns`` mean sojourn times, given that its
    run at ``factor`` spanned ``sojourns`` (the span grows with the length); ``factor``
    itself when it already does. No measure (``None`` or 0): ``max_factor``."""
    if sojourns is not None and sojourns >= confirm_sojourns:
        return factor
    if not sojourns or sojourns <= 0:
        return max(factor, max_factor)
    doublings = math.ceil(math.log2(confirm_sojourns / sojourns))
    return max(factor, min(max_factor, factor * 2**doublings))
