"""The plan's answer as text for the terminal (:func:`describe`), from ``plan.json``'s
document alone: the answer and its bracket, what bound it, the notes, and one line per
probe.
"""

from __future__ import annotations

from typing import Any

from sim.plan.pd_probe import split_name
from sim.plan.probe import fmt_value
from sim.plan.search import within_tolerance


def describe(doc: dict[str, Any], probes: bool = True) -> str:
    """The answer for the terminal: a line with the bracket, a line on what bound it
    (search limit, probe budget, configuration bound) where one applies, then (with
    ``probes``) one line per probe (worst seed per SLO, with its 95% interval
    ``[lo, hi]`` where the measurement window gives one)."""
    param = doc["param"]
    if doc["status"] == "infeasible":
        return f"no {param} searched meets the SLOs (lowest-risk probe failed)"
    text = _answer_line(doc)
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
    text += _confirmed_line(doc)
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


def _shown(x: float | None) -> str:
    """A probe value as text, ``-`` for none."""
    return "-" if x is None else fmt_value(x)


def _answer_line(doc: dict[str, Any]) -> str:
    """The answer with its bracket (or, for a P/D split, the split and the limits
    searched), the per-seed range and the number of probes."""
    param, unit = doc["param"], doc["unit"]
    b = doc["bracket"]
    split = doc.get("split")
    if split is not None:
        text = (
            f"{doc['question']}: {split['prefill']} prefill + {split['decode']} decode = "
            f"{_shown(doc['answer'])} {unit}"
        )
        below = b["first_fail"]
        text += f"  (no split of {_shown(below)} passes" if below is not None else "  (the fewest"
        limits = doc["limits"]
        text += f"; at most {limits['prefill']} prefill, {limits['decode']} decode searched"
    else:
        text = f"{doc['question']}: {param} = {_shown(doc['answer'])} {unit}".rstrip()
        text += f"  (last pass {_shown(b['last_pass'])}, first fail {_shown(b['first_fail'])}"
    ci = doc["confidence_interval"]
    if ci:
        text += f"; per-seed answers {_shown(ci['low'])} .. {_shown(ci['high'])}"
    return text + f"; {doc['num_probes']} probes)"


def _confirmed_line(doc: dict[str, Any]) -> str:
    """A line (newline first) on the runs that confirmed the answer when its probe was
    confirmed over long windows (every seed's window known), else ``""``."""
    confirmed = next(
        (p for p in doc["probes"] if p.get("confirmed") and p["value"] == doc["answer"]), None
    )
    if confirmed is None:
        return ""
    spans = [s.get("sojourns") for s in confirmed["seeds"]]
    runs = [s["length"] for s in confirmed["seeds"] if s.get("length")]
    if not (runs and all(x is not None for x in spans)):
        return ""
    unit = "requests" if runs[0]["key"] == "num_requests" else "s"
    longest = max(r["start"] * r["factors"][-1] for r in runs)
    return (
        f"\nanswer confirmed by runs of up to {longest:,.0f} {unit} per seed, windows "
        f"of {min(spans):.0f}+ mean sojourn times"
    )


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


def _wider_than_tolerance(doc: dict[str, Any]) -> bool:
    """True when the bracket is wider than ``search.rel_tol`` (or, for integer
    parameters, than adjacent values)."""
    b = doc["bracket"]
    if b["last_pass"] is None or b["first_fail"] is None:
        return True
    rel_tol = doc["plan"]["search"]["rel_tol"]
    integer = doc["param"] in ("num_replicas", "num_gpu_blocks", "max_num_seqs")
    return not within_tolerance(b["last_pass"], b["first_fail"], rel_tol, integer)
