"""Run a plan: check it, search, write ``plan.json`` and the plan report under ``out``.

``plan.json`` holds the question, the answer, the bracket (``last_pass`` /
``first_fail``), a confidence interval from the seeds' own answers, and every probe
with each seed's verdict, SLO metrics (the measurement window's; null when saturated),
their 95% intervals (``intervals``, null where the window gives none) and run
directory. For ``min_kv`` with a block or memory knob it also holds the configuration
bound (``configuration_min``: the smallest value at which the engine starts with this
``max_model_len``; ``blocks_per_request``) and ``bound``: ``"configuration"`` when the
answer is that bound (the search starts there, as every probe below it is a
configuration error), ``"workload"`` when the workload's probes set it; both null
otherwise. ``max_model_len`` is the resolved one (tokens).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvcore import __version__
from sim.app.outdir import check_output, write_marker
from sim.app.run import RunSpec
from sim.app.setup import ResolvedRun, resolve_run
from sim.plan.config_bound import KNOB_FIELD, ConfigurationBound, configuration_bound
from sim.plan.probe import (
    OnRun,
    ProbeRunner,
    fmt_value,
    is_integer_param,
    load_base_workload,
    param_name,
)
from sim.plan.search import Bisection, SearchResult, seed_answers
from sim.plan.spec import PlanError, PlanSpec
from sim.records.step_parquet import check_format
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
        check_format(plan.steps_format, "steps_format")
        resolved = resolve_run(
            RunSpec(
                workload=plan.workload,
                model=plan.model,
                gpu=plan.gpu,
                engine=plan.engine,
                pd=plan.pd,
            )
        )
    except ValueError as e:
        raise PlanError(f"{source}: {e}") from None
    return base, resolved


def search_range(
    plan: PlanSpec, resolved: ResolvedRun, source: str
) -> tuple[float, float | None, ConfigurationBound | None]:
    """``(low, high, configuration bound)`` of the search, in the parameter's unit.

    ``high`` None: open-ended. For ``min_kv`` on a block or memory knob, ``low`` is
    raised to the configuration bound (:mod:`sim.plan.config_bound`) when below it:
    every probe below it would fail on the configuration check, not on the workload.
    PlanError when the range is empty or the engine does not start at ``high``.
    """
    param = param_name(plan)
    low = plan.search.low if plan.search.low is not None else DEFAULT_LOW[param]
    high = plan.search.high
    if high is None:
        high = _default_high(param, resolved)
    if is_integer_param(plan):
        low = float(int(low))
        high = float(int(high)) if high is not None else None
    if high is not None and high <= low:
        raise PlanError(f"{source}: search.high: must be above low ({fmt_value(low)})")
    bound = None
    if plan.question == "min_kv" and high is not None and plan.knob in KNOB_FIELD:
        bound = configuration_bound(plan, resolved, high)
        if bound is None:
            raise PlanError(
                f"{source}: search.high: the engine does not start at {plan.knob} "
                f"{fmt_value(high)} (one request of max_model_len {resolved.max_model_len} "
                "tokens does not fit): raise search.high or pass --max-model-len"
            )
    if bound is not None and low < bound.value:
        low = bound.value
        if high is not None and high <= low:
            raise PlanError(
                f"{source}: search.high: {fmt_value(high)} is not above the configuration "
                f"bound ({plan.knob} {fmt_value(low)}, where the engine starts with "
                f"max_model_len {bound.max_model_len}); raise search.high or pass "
                "--max-model-len"
            )
    return low, high, bound


def run_plan(
    plan: PlanSpec,
    out: Path,
    source: str = "plan",
    force: bool = False,
    on_run: OnRun | None = None,
) -> dict[str, Any]:
    """Search, write ``plan.json`` and the report; return the plan result.

    ``on_run``: the progress bar's hook, called before each probe run
    (:class:`sim.plan.probe.ProbeRunner`).

    ``out`` is checked before any probe (:func:`sim.app.outdir.check_output`, ``force`` as
    there): :class:`sim.app.outdir.OutputError` when it may not be written.
    """
    out = Path(out)
    base, resolved = check_plan(plan, source)
    low, high, bound = search_range(plan, resolved, source)
    check_output(out, "plan", force=force)
    out.mkdir(parents=True, exist_ok=True)
    write_marker(out, "plan")
    param = param_name(plan)
    want = WANT[param]
    extra: dict[str, Any] = {}
    if plan.pd is not None and plan.question == "min_replicas":
        from sim.plan.pd_runner import search_splits

        result, probes, per_seed, extra = search_splits(plan, base, out, on_run)
    else:
        result, probes, per_seed = _search_value(plan, base, out, on_run, low, high)
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
        "configuration_min": bound.value if bound is not None else None,
        "bound": _which_bound(result.answer, bound),
        "max_model_len": resolved.max_model_len,
        "blocks_per_request": bound.blocks_per_request if bound is not None else None,
        "plan": plan.model_dump(mode="json"),
        "simulated": _simulated(probes),
        **extra,
        "probes": probes,
    }
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "plan.json", json.dumps(doc, indent=2) + "\n")
    from reports.plan_report import render_plan_report

    render_plan_report(out)
    return doc


def _search_value(
    plan: PlanSpec,
    base: Any,
    out: Path,
    on_run: OnRun | None,
    low: float,
    high: float | None,
) -> tuple[SearchResult, list[dict[str, Any]], dict[int, float | None]]:
    """Bisect the plan's one parameter and confirm the answer (searching on past an
    answer whose confirmation fails); ``(result, probes by value, per-seed answers)``."""
    runner = ProbeRunner(plan, base, out, on_run)
    param = runner.param
    want = WANT[param]
    search = Bisection(
        runner.probe,
        want=want,
        integer=is_integer_param(plan),
        geometric=param == "rate",  # integer parameters bisect arithmetically
        rel_tol=plan.search.rel_tol,
        max_probes=plan.search.max_probes,
    )
    result = search.run(low, high)
    # The answer must also hold over a long window (sim.plan.length): a probe that
    # fails its confirmation is a failure, and the search goes on beyond it.
    while result.answer is not None and not runner.confirm(result.answer):
        passed = [p["value"] for p in runner.probes if p["passed"]]
        result = search.resume_below(result.answer, passed)
    probes = sorted(runner.probes, key=lambda p: p["value"])
    return result, probes, seed_answers(runner.probes, want)


def _which_bound(answer: float | None, bound: ConfigurationBound | None) -> str | None:
    """``"configuration"`` when the answer is the configuration bound (the engine does
    not start below it, so the workload's own need is not known), ``"workload"`` when
    the answer lies above it (probes failed on the workload), None without a bound or
    an answer."""
    if bound is None or answer is None:
        return None
    return "configuration" if answer <= bound.value else "workload"


def _simulated(probes: list[dict[str, Any]]) -> dict[str, int]:
    """What the plan cost: runs and requests simulated over every probe and seed
    (requests counted for request-length runs only)."""
    runs = requests = 0
    for probe in probes:
        for seed in probe["seeds"]:
            length = seed.get("length")
            if not length:
                continue
            runs += len(length["factors"])
            if length["key"] == "num_requests":
                requests += int(length["start"]) * sum(length["factors"])
    return {"runs": runs, "num_requests": requests}
