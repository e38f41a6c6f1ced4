"""Run a recommendation: prepare, branch and bound over the candidates, check the top
ones as whole clusters, rank, write the recommend directory.

The recommend directory::

    DIR/recommend.yaml              the spec as validated, its source, kvsim's version
    DIR/candidates/<hash>/          one per searched candidate: plan/ and result.json
    DIR/verify/<hash>-x<R>/         cluster checks: seed_<s>/ runs and seed_<s>.json
    DIR/recommend.json              every candidate, the ranking, the frontier (last)
    DIR/pareto.csv, DIR/plots/pareto.png, DIR/report.html

Every finished search and check is cached under its configuration hash, so a run
that was interrupted (or one with other prices, ``top`` or objective) does only what
is missing. ``recommend.json`` is written last: a directory without it is not a
finished recommendation.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from kvcore import __version__
from sim.app.outdir import check_output, write_marker
from sim.recommend.cluster_checks import ranked, verify_top
from sim.recommend.pareto import frontier
from sim.recommend.prepare import Prepared
from sim.recommend.searching import OnEvent, search_candidates
from sim.sweep.table import write_atomic


def _chosen_point(top: dict[str, Any] | None) -> dict[str, Any] | None:
    """The chosen deployment's point: its passing cluster check, else its answer."""
    if top is None:
        return None
    passing = [c for c in top.get("checks", []) if c["passed"]]
    if passing:
        c = passing[-1]
        return {
            "key": top["key"],
            "rate": None,
            "replicas": c["replicas"],
            "tokens_per_s_per_gpu": c["tokens_per_s_per_gpu"],
            "tokens_per_s_per_user": c["tokens_per_s_per_user"],
            "source": "cluster check",
        }
    at = next((p for p in top.get("points", []) if p["rate"] == top.get("rate")), None)
    return {**at, "key": top["key"], "source": "per-replica answer"} if at else None


def run_recommend(
    prep: Prepared,
    out: Path,
    jobs: int = 1,
    force: bool = False,
    on_event: OnEvent | None = None,
) -> dict[str, Any]:
    """Search, check, rank and write the recommend directory; return ``recommend.json``'s
    document. ``out`` is checked first (:func:`sim.app.outdir.check_output`)."""
    out = Path(out)
    check_output(out, "recommend", force=force)
    out.mkdir(parents=True, exist_ok=True)
    write_marker(out, "recommend")
    for name in ("recommend.json", "pareto.csv", "report.html"):
        (out / name).unlink(missing_ok=True)  # an earlier run's: not this one's answer
    spec = prep.spec
    meta = {
        "kvsim_version": __version__,
        "source": prep.source,
        "spec": spec.model_dump(mode="json"),
    }
    write_atomic(out / "recommend.yaml", yaml.safe_dump(meta, sort_keys=False))
    search_candidates(prep, out, jobs, on_event)
    verify_top(prep, out, jobs, on_event)
    order = ranked(prep.entries)
    for i, entry in enumerate(order, start=1):
        entry["rank"] = i
    points = [
        {"key": e["key"], "gpu": e["gpu"], "tensor_parallel_size": e["tensor_parallel_size"], **p}
        for e in prep.entries
        if e["status"] == "searched"
        for p in e.get("points", [])
    ]
    front = frontier(points)
    chosen = _chosen_point(order[0] if order else None)
    doc = _document(prep, order, points, front, chosen)
    from sim.recommend.outputs import write_outputs

    write_outputs(out, doc)
    return doc


def _counts(prep: Prepared) -> dict[str, int]:
    """How many candidates ended in each status, and the cluster checks run."""
    statuses = [e["status"] for e in prep.entries]
    checks = sum(len(e.get("checks", [])) + (1 if "fewer_check" in e else 0) for e in prep.entries)
    return {
        "candidates": len(statuses),
        "configuration": statuses.count("configuration"),
        "infeasible": statuses.count("infeasible"),
        "pruned": statuses.count("pruned"),
        "simulated": statuses.count("searched") + statuses.count("no_rate"),
        "no_rate": statuses.count("no_rate"),
        "errors": statuses.count("error"),
        "cluster_checks": checks,
    }


def _document(
    prep: Prepared,
    ranked: list[dict[str, Any]],
    points: list[dict[str, Any]],
    front: list[dict[str, Any]],
    chosen: dict[str, Any] | None,
) -> dict[str, Any]:
    """``recommend.json``'s document (see the module docstring)."""
    spec = prep.spec
    prices_known = prep.scoring.by_price
    return {
        "kvsim_version": __version__,
        "model": spec.model,
        "workload": spec.workload,
        "slo": spec.slo.bounds(),
        "target_rate": spec.target_rate,
        "objective": spec.goal,
        "scored_by": ("cost_per_hour" if prices_known else "gpus")
        if spec.goal == "cost"
        else "goodput_per_gpu",
        "router": spec.router,
        "top": spec.top,
        "counts": _counts(prep),
        "ranking": [e["key"] for e in ranked],
        "chosen": ranked[0]["key"] if ranked else None,
        "chosen_point": chosen,
        "pareto": front,
        "points": points,
        "candidates": [_clean(e) for e in prep.entries],
        "spec": spec.model_dump(mode="json"),
    }


def _clean(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as JSON: infinities as null."""

    def fix(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: fix(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        return v

    return fix(entry)


def load_document(out: Path) -> dict[str, Any]:
    """``recommend.json`` of a finished recommend directory."""
    return json.loads((Path(out) / "recommend.json").read_text(encoding="utf-8"))
