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
from sim.plan.pd_probe import split_name
from sim.plan.probe import (
    OnRun,
    ProbeRunner,
    fmt_value,
    is_integer_param,
    load_base_workload,
    param_name,
)
from sim.plan.search import Bisection, SearchResult, seed_answers, within_tolerance
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


def _bound_line(doc: dict[str, Any]) -> str | None:
    """The line saying which bound set a ``min_kv`` answer, or None."""
    which, cmin = doc.get("bound"), doc.get("configuration_min")
    if which is None or cmin is None:
        return None
    param, max_len = doc["param"], doc.get("max_model_len")
    if param == "num_gpu_blocks":
        need = f"max_model_len {max_len} needs {fmt_value(cmin)} blocks to start"
        per_request = doc.get("blocks_per_request")
        if per_request is not None:
            need += f" ({per_request} for one request, plus the null block)"
    else:
        need = (
            f"max_model_len {max_len} needs {param} {fmt_value(cmin)} to start "
            "(one request's KV cache must fit)"
        )
    if which == "configuration":
        return (
            f"the answer is the configuration bound: {need}; the workload may need less: "
            "pass --max-model-len to plan for the workload's need"
        )
    return f"the answer is the workload's need (the configuration bound: {need})"


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


def _probe_lines(doc: dict[str, Any]) -> list[str]:
    """One line per probe: value, pass/fail, and for each SLO the worst seed's window
    figure with its 95% interval where there is one."""
    lines = []
    for p in doc["probes"]:
        label = split_name(_split(p)) if "split" in p else fmt_value(p["value"])
        cells = [f"  {label:>8}  {'pass' if p['passed'] else 'fail'}"]
        seeds = p["seeds"]
        runs = [s["length"] for s in seeds if s.get("length")]
        if runs:
            longest = max(runs, key=lambda r: r["factors"][-1])
            unit = "req" if longest["key"] == "num_requests" else "s"
            cells.append(f"{longest['start'] * longest['factors'][-1]:,.0f} {unit}")
        if any(s.get("metrics") is None for s in seeds):
            bad = next(s for s in seeds if s.get("metrics") is None)
            why = "; ".join(bad.get("failures") or []) or bad.get("state", "")
            cells.append(f"seed {bad['seed']}: {why}")
        else:
            for metric in doc["slo"]:
                worst = max(seeds, key=lambda s: s["metrics"][metric])
                text = f"{metric} {worst['metrics'][metric]:.4g}"
                ci = (worst.get("intervals") or {}).get(metric)
                if ci:
                    text += f" [{ci[0]:.4g}, {ci[1]:.4g}]"
                cells.append(text)
        lines.append("  ".join(cells))
    return lines


def _split(probe: dict[str, Any]) -> tuple[int, int]:
    return int(probe["split"]["prefill"]), int(probe["split"]["decode"])


def describe(doc: dict[str, Any], probes: bool = True) -> str:
    """The answer for the terminal: a line with the bracket, a line on what bound it
    (search limit, probe budget, configuration bound) where one applies, then (with
    ``probes``) one line per probe (worst seed per SLO, with its 95% interval
    ``[lo, hi]`` where the measurement window gives one)."""
    param, unit = doc["param"], doc["unit"]
    b = doc["bracket"]
    if doc["status"] == "infeasible":
        return f"no {param} searched meets the SLOs (lowest-risk probe failed)"

    def f(x: float | None) -> str:
        return "-" if x is None else fmt_value(x)

    split = doc.get("split")
    if split is not None:
        text = (
            f"{doc['question']}: {split['prefill']} prefill + {split['decode']} decode = "
            f"{f(doc['answer'])} {unit}"
        )
        below = b["first_fail"]
        text += f"  (no split of {f(below)} passes" if below is not None else "  (the fewest"
        limits = doc["limits"]
        text += f"; at most {limits['prefill']} prefill, {limits['decode']} decode searched"
    else:
        text = f"{doc['question']}: {param} = {f(doc['answer'])} {unit}".rstrip()
        text += f"  (last pass {f(b['last_pass'])}, first fail {f(b['first_fail'])}"
    ci = doc["confidence_interval"]
    if ci:
        text += f"; per-seed answers {f(ci['low'])} .. {f(ci['high'])}"
    text += f"; {doc['num_probes']} probes)"
    bound_line = _bound_line(doc)
    if doc["status"] == "at_bound" and doc.get("bound") != "configuration":
        text += f"\nevery probe passed up to the search limit: the true {param} is beyond it"
    elif doc["status"] == "max_probes" and _wider_than_tolerance(doc):
        text += "\nstopped at search.max_probes before the bracket met search.rel_tol"
    if bound_line:
        text += "\n" + bound_line
    notes = sorted(
        {s["length_note"] for p in doc["probes"] for s in p["seeds"] if s.get("length_note")}
    )
    for note in notes:
        text += f"\nnote: {note}"
    confirmed = next(
        (p for p in doc["probes"] if p.get("confirmed") and p["value"] == doc["answer"]), None
    )
    if confirmed is not None:
        spans = [s.get("sojourns") for s in confirmed["seeds"]]
        runs = [s["length"] for s in confirmed["seeds"] if s.get("length")]
        if runs and all(x is not None for x in spans):
            unit = "requests" if runs[0]["key"] == "num_requests" else "s"
            longest = max(r["start"] * r["factors"][-1] for r in runs)
            text += (
                f"\nanswer confirmed by runs of up to {longest:,.0f} {unit} per seed, windows "
                f"of {min(spans):.0f}+ mean sojourn times"
            )
    sim = doc.get("simulated")
    if sim:
        text += (
            f"\nsimulated {sim['num_requests']:,} requests in {sim['runs']:,} runs "
            "(probe runs lengthen until they decide)"
        )
    lines = _probe_lines(doc) if probes else []
    if lines:
        text += "\nprobes (worst seed per SLO, window figures, [95% interval]):\n"
        text += "\n".join(lines)
    return text


def _wider_than_tolerance(doc: dict[str, Any]) -> bool:
    """True when the bracket is wider than ``search.rel_tol`` (or, for integer
    parameters, than adjacent values)."""
    b = doc["bracket"]
    if b["last_pass"] is None or b["first_fail"] is None:
        return True
    rel_tol = doc["plan"]["search"]["rel_tol"]
    integer = doc["param"] in ("num_replicas", "num_gpu_blocks", "max_num_seqs")
    return not within_tolerance(b["last_pass"], b["first_fail"], rel_tol, integer)
