"""One candidate's per-replica capacity: ``kvsim plan``'s max_rate search, cached.

Runs in a worker process (or inline with one job). The candidate's directory
``OUT/candidates/<hash>/`` holds the plan directory (``plan/``: ``plan.json``, its
report, the probes) and, once the search has finished, ``result.json``; a directory
with ``result.json`` is reused as it is, one without is searched again (the plan
probes again in place). Unless ``keep_runs``, the probes' ``steps.csv``,
``requests.csv`` and ``decisions.jsonl`` are removed once the search is over
(``summary.json`` and ``config.yaml`` of every probe run stay).

Each probe that meets the SLOs is a point of the Pareto chart: output tokens per
second per GPU (the window's output throughput over the replica's GPUs) against
tokens per second per user (one over the window's mean TPOT), averaged over seeds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sim import offload
from sim.plan.runner import run_plan
from sim.plan.spec import PlanSpec
from sim.sweep.table import write_atomic

RESULT = "result.json"
RUN_FILES = ("steps.csv", "requests.csv", "decisions.jsonl")
"""The large per-run files removed after the search unless ``keep_runs``."""


def cached_result(directory: Path) -> dict[str, Any] | None:
    """The candidate's finished result, or None when it must be searched."""
    path = Path(directory) / RESULT
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _window(summary: dict[str, Any]) -> dict[str, Any]:
    window = summary.get("window")
    return window if isinstance(window, dict) else summary


def probe_point(probe: dict[str, Any], tp: int) -> dict[str, Any] | None:
    """The Pareto point of a passing probe (None for a failing one, or one whose runs
    left no summary)."""
    if not probe["passed"]:
        return None
    tokens, tpots = [], []
    for seed in probe["seeds"]:
        path = Path(seed["run_dir"]) / "summary.json"
        try:
            window = _window(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None
        tokens.append(float(window["output_tokens_per_s"]))
        tpots.append(float(window["tpot_s"]["mean"]))
    mean_tpot = sum(tpots) / len(tpots)
    return {
        "rate": probe["value"],
        "tokens_per_s_per_gpu": _sig(sum(tokens) / len(tokens) / tp),
        "tokens_per_s_per_user": _sig(1.0 / mean_tpot) if mean_tpot > 0 else None,
    }


def _sig(x: float) -> float:
    """``x`` to 6 significant digits (float noise in a constant step time is not a
    difference on the frontier)."""
    return float(f"{x:.6g}")


def worst_metrics(probe: dict[str, Any]) -> dict[str, float] | None:
    """Each SLO metric's worst seed at a probe (None when a seed has none)."""
    seeds = probe["seeds"]
    if any(s.get("metrics") is None for s in seeds):
        return None
    keys = seeds[0]["metrics"].keys()
    return {k: max(float(s["metrics"][k]) for s in seeds) for k in keys}


def _prune_runs(plan_dir: Path) -> None:
    probes = plan_dir / "probes"
    if not probes.is_dir():
        return
    for name in RUN_FILES:
        for path in sorted(probes.glob(f"*/seed_*/{name}")):
            path.unlink()


def evaluate(payload: dict[str, Any]) -> dict[str, Any]:
    """Search one candidate; write and return its result.

    ``payload``: ``dir`` (the candidate's directory), ``key``, ``plan`` (a PlanSpec as
    a mapping), ``tensor_parallel_size``, ``keep_runs``, ``helpers`` (False in a
    worker pool: the pool keeps the CPUs busy).
    """
    if not payload.get("helpers", True):
        os.environ[offload.ENV_SWITCH] = "0"
    directory = Path(payload["dir"])
    directory.mkdir(parents=True, exist_ok=True)
    plan = PlanSpec.model_validate(payload["plan"])
    plan_dir = directory / "plan"
    doc = run_plan(plan, plan_dir, source=payload["key"])
    tp = int(payload["tensor_parallel_size"])
    points = [p for p in (probe_point(probe, tp) for probe in doc["probes"]) if p is not None]
    answer_probe = next((p for p in doc["probes"] if p["value"] == doc["answer"]), None)
    notes = sorted(
        {s["length_note"] for p in doc["probes"] for s in p["seeds"] if s.get("length_note")}
    )
    result = {
        "status": doc["status"],
        "rate": doc["answer"],
        "bracket": doc["bracket"],
        "num_probes": doc["num_probes"],
        "simulated": doc["simulated"],
        "at_rate": worst_metrics(answer_probe) if answer_probe is not None else None,
        "points": sorted(points, key=lambda p: p["rate"]),
        "notes": notes,
        "easiest_failure": _easiest_failure(doc),
    }
    if not payload.get("keep_runs", False):
        _prune_runs(plan_dir)
    write_atomic(directory / RESULT, json.dumps(result, indent=2) + "\n")
    return result


def _easiest_failure(doc: dict[str, Any]) -> str | None:
    """Why the lowest probe failed, for an infeasible search."""
    if doc["status"] != "infeasible" or not doc["probes"]:
        return None
    seeds = [s for s in doc["probes"][0]["seeds"] if not s["passed"]]
    return "; ".join(seeds[0]["failures"]) if seeds else None
