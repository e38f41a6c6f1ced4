"""Run a plan: check it, search, write ``plan.json`` and the plan report under ``out``.

``plan.json`` holds the question, the answer, the bracket (``last_pass`` /
``first_fail``), a confidence interval from the seeds' own answers, and every probe
with each seed's verdict, SLO metrics (null when saturated) and run directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvcore import __version__
from sim.outdir import check_output, write_marker
from sim.plan.probe import ProbeRunner, fmt_value, is_integer_param, load_base_workload
from sim.plan.search import Bisection, seed_answers
from sim.plan.spec import PlanError, PlanSpec
from sim.run import RunSpec
from sim.setup import ResolvedRun, resolve_run
from sim.sweep.table import write_atomic

WANT = {
    "rate": "max",
    "num_replicas": "min",
    "num_gpu_blocks": "min",
    "gpu_memory_utilization": "min",
    "max_num_seqs": "max",
}
DEFAULT_LOW = {
    "rate": 0.5,
    "num_replicas": 1,
    "num_gpu_blocks": 16,
    "gpu_memory_utilization": 0.1,
    "max_num_seqs": 1,
}
UNITS = {"rate": "req/s", "num_replicas": "replicas", "num_gpu_blocks": "blocks"}


def _default_high(param: str, resolved: ResolvedRun) -> float | None:
    """The base configuration's own value for KV knobs (the search stays below it),
    else open."""
    if param == "gpu_memory_utilization":
        return 0.95
    if param == "num_gpu_blocks":
        return float(resolved.num_gpu_blocks)
    if param == "max_num_seqs":
        return float(resolved.max_num_seqs)
    return None


def check_plan(plan: PlanSpec, source: str) -> tuple[Any, ResolvedRun]:
    """Load the base workload and resolve the base configuration, so bad names fail
    before any probe runs; returns both."""
    base = load_base_workload(plan, source)
    try:
        resolved = resolve_run(
            RunSpec(workload=plan.workload, model=plan.model, gpu=plan.gpu, engine=plan.engine)
        )
    except ValueError as e:
        raise PlanError(f"{source}: {e}") from None
    return base, resolved


def run_plan(
    plan: PlanSpec, out: Path, source: str = "plan", force: bool = False
) -> dict[str, Any]:
    """Search, write ``plan.json`` and the report; return the plan result.

    ``out`` is checked before any probe (:func:`sim.outdir.check_output`, ``force`` as
    there): :class:`sim.outdir.OutputError` when it may not be written.
    """
    out = Path(out)
    base, resolved = check_plan(plan, source)
    check_output(out, "plan", force=force)
    out.mkdir(parents=True, exist_ok=True)
    write_marker(out, "plan")
    runner = ProbeRunner(plan, base, out)
    param = runner.param
    want = WANT[param]
    integer = is_integer_param(plan)
    low = plan.search.low if plan.search.low is not None else DEFAULT_LOW[param]
    high = plan.search.high
    if high is None:
        high = _default_high(param, resolved)
    if integer:
        low = float(int(low))
        high = float(int(high)) if high is not None else None
    if high is not None and high <= low:
        raise PlanError(f"{source}: search.high: must be above low ({fmt_value(low)})")
    search = Bisection(
        runner.probe,
        want=want,
        integer=integer,
        geometric=param == "rate",  # integer parameters bisect arithmetically
        rel_tol=plan.search.rel_tol,
        max_probes=plan.search.max_probes,
    )
    result = search.run(low, high)
    per_seed = seed_answers(runner.probes, want)
    known = [v for v in per_seed.values() if v is not None]
    ci = None
    if known and len(known) == len(per_seed):
        ci = {"low": min(known), "high": max(known)}
    doc = {
        "kvsim_version": __version__,
        "question": plan.question,
        "param": param,
        "want": want,
        "unit": UNITS.get(param, ""),
        "status": result.status,
        "answer": result.answer,
        "bracket": {"last_pass": result.last_pass, "first_fail": result.first_fail},
        "confidence_interval": ci,
        "seed_answers": {str(k): v for k, v in per_seed.items()},
        "slo": plan.slo.bounds(),
        "num_probes": result.num_probes,
        "plan": plan.model_dump(mode="json"),
        "probes": sorted(runner.probes, key=lambda p: p["value"]),
    }
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "plan.json", json.dumps(doc, indent=2) + "\n")
    from reports.plan_report import render_plan_report

    render_plan_report(out)
    return doc


def describe(doc: dict[str, Any]) -> str:
    """One or two lines for the terminal."""
    param, unit = doc["param"], doc["unit"]
    b = doc["bracket"]
    if doc["status"] == "infeasible":
        return f"no {param} searched meets the SLOs (lowest-risk probe failed)"

    def f(x: float | None) -> str:
        return "-" if x is None else fmt_value(x)

    text = f"{doc['question']}: {param} = {f(doc['answer'])} {unit}".rstrip()
    text += f"  (last pass {f(b['last_pass'])}, first fail {f(b['first_fail'])}"
    ci = doc["confidence_interval"]
    if ci:
        text += f"; per-seed answers {f(ci['low'])} .. {f(ci['high'])}"
    text += f"; {doc['num_probes']} probes)"
    if doc["status"] == "at_bound":
        text += f"\nevery probe passed up to the search limit: the true {param} is beyond it"
    elif doc["status"] == "max_probes":
        text += "\nstopped at search.max_probes before the bracket met search.rel_tol"
    return text
