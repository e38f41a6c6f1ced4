"""A run's figures as an operator reads them: sentences and table rows in the CLI's
units (ms, %, req/s), from ``summary.json`` and ``config.yaml`` alone.

The headline figures are the measurement window's (``summary["window"]``: warm-up
cut, drain after the last arrival left out); whole-run figures are labelled as such.
Every function takes the parsed files and returns plain text (no HTML), so the HTML
report and the terminal can share them.
"""

from __future__ import annotations

from typing import Any

GIB = 1024**3
MIB = 1024**2

VERDICT_HEADLINES = {
    "steady": "Steady: the configuration keeps up with the offered load.",
    "saturated": (
        "Saturated: the configuration cannot keep up with the offered load; its "
        "latencies grow with the run's length and are not a meaningful figure."
    ),
    "undecided": (
        "Undecided: this run is too short to tell whether the configuration keeps up "
        "(still filling, or saturating slowly); run it longer (more requests)."
    ),
}
"""The first sentence of the verdict, per state (``sim.records.verdict``)."""

_REASON_LABELS = {
    "throughput": "Requests finish slower than they arrive",
    "preemptions": "Preemption storm",
    "livelock": "Livelock",
}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def sentence(text: str) -> str:
    """``text`` with a capital first letter and a final period."""
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def reason_sentence(reason: str) -> str:
    """One verdict reason (``"queue: the waiting queue grows ..."``) as a sentence."""
    key, sep, rest = reason.partition(": ")
    if not sep:
        return sentence(reason)
    label = _REASON_LABELS.get(key)
    return sentence(f"{label}: {rest}" if label else rest)


def verdict_text(summary: dict[str, Any]) -> tuple[str, str, list[str]]:
    """``(state, headline, sentences)``: the verdict state (``"unknown"`` for a summary
    without one), its headline with the load it was judged at, and one sentence per
    reason and note."""
    verdict = summary.get("verdict")
    if not isinstance(verdict, dict):
        return "unknown", "No verdict in summary.json (written by an older kvsim).", []
    state = str(verdict.get("state", "unknown"))
    head = VERDICT_HEADLINES.get(state, f"Verdict: {state}.")
    window = summary.get("window")
    offered = verdict.get("offered_rps") or 0.0
    if isinstance(window, dict) and window.get("offered_rps"):
        offered = window["offered_rps"]
    if offered:
        head = head[:-1] + f" (offered {offered:,.2f} req/s)."
    lines = [reason_sentence(r) for r in verdict.get("reasons") or []]
    lines += [sentence(n) for n in verdict.get("notes") or []]
    kv = kv_sentence(summary)
    return state, head, [*lines, *([kv] if kv else [])]


def kv_sentence(summary: dict[str, Any]) -> str:
    """The KV cache in one sentence: mean and peak usage of the blocks, preemptions
    and waiting (the measurement window's where there is one)."""
    window = summary.get("window")
    source = window if isinstance(window, dict) and "kv_usage" in window else summary
    kv = source.get("kv_usage")
    if not isinstance(kv, dict):
        return ""
    blocks = _int(summary.get("num_gpu_blocks"))
    of = f" of {blocks:,} blocks" if blocks else ""
    preempted = _int(summary.get("num_preemptions"))
    what = (
        f"{preempted:,} preemptions ({float(summary.get('preemptions_per_request') or 0):.3f} "
        "per request)"
        if preempted
        else "no preemptions"
    )
    scope = " in the measurement window" if source is window else ""
    return sentence(
        f"KV cache{scope}: {kv['mean']:.0%} in use on average, peak {kv['max']:.0%}{of}; "
        f"{what} over the whole run"
    )


def limit_lines(summary: dict[str, Any]) -> list[str]:
    """Requests that met max_model_len, when any: rejected prompts (``rejected`` /
    ``num_rejected``) and capped outputs (``num_capped_outputs``); [] when none."""
    lines = []
    rejected = summary.get("rejected")
    rejected = rejected if isinstance(rejected, dict) else {}
    num = _int(rejected.get("prompt_too_long")) or _int(summary.get("num_rejected"))
    limit = _int(rejected.get("max_model_len"))
    within = f" (prompt of at least max_model_len, {limit:,} tokens)" if limit else ""
    if num:
        total = _int(summary.get("num_requests"))
        of = f" of {total:,}" if total else ""
        first = rejected.get("first_request_id")
        example = f"; the first is {first}" if first else ""
        lines.append(f"{num:,}{of} requests rejected{within}: they never ran{example}")
    capped = _int(summary.get("num_capped_outputs"))
    if capped:
        lines.append(
            f"{capped:,} requests' outputs capped at max_model_len: they produced fewer "
            "output tokens than asked"
        )
    return lines


def budget_line(summary: dict[str, Any], config: dict[str, Any]) -> str:
    """The KV cache budget: blocks x block size, tokens, GiB, and where it came from
    (``config.yaml``'s ``kv_budget`` terms; the summary's block count when absent)."""
    terms = config.get("kv_budget")
    terms = terms if isinstance(terms, dict) else {}
    blocks = _int(terms.get("num_gpu_blocks")) or _int(summary.get("num_gpu_blocks"))
    size = _int(terms.get("block_size")) or _int(summary.get("block_size"))
    text = f"{blocks:,} blocks x {size} tokens = {blocks * size:,} tokens per replica"
    per_block = _int(terms.get("bytes_per_block"))
    if per_block:
        text += f" ({blocks * per_block / GIB:,.1f} GiB at {per_block / MIB:,.2f} MiB per block)"
    max_len = _int(terms.get("max_model_len"))
    if max_len and terms.get("max_concurrency"):
        text += (
            f"; {float(terms['max_concurrency']):,.1f} requests of max_model_len "
            f"{max_len:,} tokens fit at once"
        )
    if not terms:
        return text + "."
    where = f"{terms.get('model', '?')} on {terms.get('gpu', '?')}"
    tp = _int(terms.get("tensor_parallel_size"))
    if tp > 1:
        where += f" (TP {tp}, per GPU)"
    if terms.get("num_gpu_blocks_override") is not None:
        room = _int(terms.get("available_kv_bytes")) // per_block if per_block else 0
        return text + (
            f". Set by num_gpu_blocks_override; vLLM's memory accounting for {where} "
            f"leaves room for {room:,} blocks."
        )
    source = "vLLM's memory accounting"
    if config.get("calibration"):
        source = f"memory measured by kvsim calibrate ({config['calibration']})"
    parts = [
        ("weights", "weights_bytes"),
        ("activation peak", "activation_peak_bytes"),
        ("non-torch memory", "non_torch_bytes"),
        ("CUDA graphs", "cudagraph_bytes"),
    ]
    minus = ", ".join(f"{name} {_int(terms.get(k)) / GIB:,.1f}" for name, k in parts)
    return text + (
        f". From {source} for {where}: {_int(terms.get('total_memory_bytes')) / GIB:,.1f} GiB "
        f"x gpu_memory_utilization {terms.get('gpu_memory_utilization')} = "
        f"{_int(terms.get('requested_memory_bytes')) / GIB:,.1f} GiB, minus {minus} GiB "
        f"leaves {_int(terms.get('available_kv_bytes')) / GIB:,.1f} GiB for the KV cache."
    )


def steps_line(summary: dict[str, Any]) -> str | None:
    """What the steps file holds when it is not ``steps.csv`` with a row per step
    (``--steps thin`` or ``none``, ``--steps-format parquet``), else None."""
    info = summary.get("steps_file")
    if not isinstance(info, dict):
        return None
    mode = info.get("mode")
    steps = _int(summary.get("num_steps"))
    name = info.get("file") or "steps.csv"
    if mode == "thin":
        width = float(info.get("bucket_s") or 0.0)
        return (
            f"{name} is thinned (--steps thin): {_int(info.get('rows')):,} rows for "
            f"{steps:,} engine steps, one per replica per {width:.3g} s; levels (running, "
            "waiting, KV usage) are each bucket's first step, counts (preemptions, "
            "tokens) its sums"
        )
    if mode == "none":
        return (
            f"steps.csv was not written (--steps none; {steps:,} engine steps): the "
            "timeline and replica plots are left out; the figures above are complete"
        )
    if name != "steps.csv":
        return f"The step rows are in {name} (--steps-format parquet), one per engine step"
    return None


def _pct(d: dict[str, Any]) -> str:
    return f"mean {d['mean']:.1%}, p99 {d['p99']:.1%}, max {d['max']:.1%}"


def whole_run_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, value)`` rows of the whole run (warm-up and drain included)."""
    rows = [
        ("requests finished", f"{summary['num_finished']:,} of {summary['num_requests']:,}"),
        ("simulated time", f"{summary['sim_duration_s']:,.1f} s"),
        (
            "throughput",
            f"{summary['throughput_rps']:,.2f} req/s, "
            f"{summary['output_tokens_per_s']:,.0f} output tok/s",
        ),
    ]
    for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E latency")):
        d = summary[key]
        rows.append(
            (
                f"{name} mean / p50 / p90 / p99",
                " / ".join(f"{d[q] * 1e3:,.1f}" for q in ("mean", "p50", "p90", "p99")) + " ms",
            )
        )
    rows += [
        (
            "preemptions",
            f"{summary['num_preemptions']:,} ({summary['preemptions_per_request']:.3f} per "
            "request)",
        ),
        ("prefix cache hit rate", f"{summary['prefix_cache_hit_rate']:.1%} of prompt tokens"),
        *(
            [("speculative decoding", spec_decode_fact(summary["spec_decode"]))]
            if "spec_decode" in summary
            else []
        ),
        ("KV cache usage", _pct(summary["kv_usage"])),
        ("engine steps", f"{summary['num_steps']:,}"),
        ("wall time", f"{summary.get('wall_s', 0.0):,.2f} s"),
    ]
    return rows


def spec_decode_fact(block: dict[str, Any]) -> str:
    """One line of a run's ``spec_decode`` block: method, drafts per step, acceptance."""
    return (
        f"{block['method']}, k = {block['num_speculative_tokens']}: "
        f"{block['acceptance_rate']:.1%} of draft tokens accepted, "
        f"{block['mean_acceptance_length']:.2f} tokens per draft, "
        f"{block['tokens_per_decode']:.2f} per scheduled decode"
    )


def replica_rows(summary: dict[str, Any]) -> list[list[str]]:
    """One row per replica: id, routed, finished, preemptions, prefix hit rate, mean KV
    usage; [] for a one-replica run."""
    replicas = summary.get("replicas")
    if not isinstance(replicas, list) or len(replicas) < 2:
        return []
    return [
        [
            str(r.get("replica")),
            f"{_int(r.get('num_routed')):,}",
            f"{_int(r.get('num_finished')):,}",
            f"{_int(r.get('num_preemptions')):,}",
            f"{float(r.get('prefix_cache_hit_rate') or 0.0):.1%}",
            f"{float(r.get('kv_usage_mean') or 0.0):.1%}",
        ]
        for r in replicas
    ]
