"""``min_replicas`` of a P/D plan: the fewest prefill + decode instances at the plan's
rate, and their split (:mod:`sim.plan.pd_search`), each answer confirmed over a long
window as any plan's is.

``plan.json`` gains ``split`` (the answer's ``prefill`` and ``decode`` counts),
``limits`` (the most of each searched: the plan's ``pd`` counts) and ``frontier``
(per prefill count walked, the fewest decode instances found to pass with it); each
probe has its ``split``. ``answer`` and the bracket count instances (``P + D``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.plan.pd_probe import PDProbeRunner
from sim.plan.pd_search import SplitResult, seed_split_answers, walk_splits
from sim.plan.probe import OnRun
from sim.plan.search import SearchResult
from sim.plan.spec import PlanSpec
from workloads.spec import WorkloadSpec

DEFAULT_MAX_PROBES = 24
"""A P/D plan's probe budget when ``search.max_probes`` is not given (a walk over two
counts needs more probes than a bisection over one)."""


def max_probes(plan: PlanSpec) -> int:
    """``search.max_probes`` when given, else :data:`DEFAULT_MAX_PROBES`."""
    given = "max_probes" in plan.search.model_fields_set
    return plan.search.max_probes if given else DEFAULT_MAX_PROBES


def search_splits(
    plan: PlanSpec, base: WorkloadSpec, out: Path, on_run: OnRun | None = None
) -> tuple[SearchResult, list[dict[str, Any]], dict[int, Any], dict[str, Any]]:
    """Walk the splits, confirm the answer (walking on past a split whose
    confirmation fails); ``(result, probes, per-seed answers, plan.json's extra keys)``."""
    runner = PDProbeRunner(plan, base, out, max_probes(plan), on_run)
    walk = walk_splits(runner.passes, *runner.limits)
    while walk.best is not None and not runner.confirm_split(walk.best):
        walk = walk_splits(runner.passes, *runner.limits)
    per_seed = seed_split_answers(runner.seed_verdicts(), list(plan.seeds), *runner.limits)
    probes = sorted(runner.probes, key=lambda p: (p["value"], p["split"]["prefill"]))
    return (
        _result(walk, runner.limits, len(runner.probes)),
        probes,
        dict(per_seed),
        _extra(walk, runner),
    )


def _result(walk: SplitResult, limits: tuple[int, int], num_probes: int) -> SearchResult:
    total = walk.total
    if walk.status == "infeasible":  # the corner, the only split probed, failed
        return SearchResult("infeasible", None, None, float(sum(limits)), num_probes)
    below = total - 1 if walk.status == "bracketed" and total is not None and total > 2 else None
    return SearchResult(walk.status, total, total, below, num_probes)


def _extra(walk: SplitResult, runner: PDProbeRunner) -> dict[str, Any]:
    best = walk.best
    prefill, decode = runner.limits
    return {
        "unit": "instances",
        "split": None if best is None else {"prefill": best[0], "decode": best[1]},
        "limits": {"prefill": prefill, "decode": decode},
        "frontier": walk.frontier,
    }
