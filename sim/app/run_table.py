"""The summary table ``kvsim run`` prints (:func:`summary_table`), from a run's
``summary.json`` figures, with the run's warnings on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.table import Table

from reports.html import plus_minus
from reports.run_facts import spec_decode_fact


def _print_warnings(summary: dict[str, Any]) -> None:
    """One ``kvsim: warning:`` line on stderr per kind of request that met
    max_model_len (:mod:`sim.engine.input_limits`) and per warning of the measurement
    window."""
    from sim.engine.input_limits import warnings as limit_warnings

    for line in limit_warnings(summary):
        print(f"kvsim: warning: {line}", file=sys.stderr)
    for line in (summary.get("window") or {}).get("warnings", []):
        print(f"kvsim: warning: measurement window: {line}", file=sys.stderr)


def _request_rows(t: Table, summary: dict[str, Any]) -> None:
    """The requests' rows: finished, rejected and capped at max_model_len, and the
    simulated time."""
    t.add_row("requests finished", f"{summary['num_finished']:,} / {summary['num_requests']:,}")
    rejected = summary.get("rejected") or {}
    if rejected.get("prompt_too_long"):
        t.add_row(
            "rejected: prompt >= max_model_len",
            f"{rejected['prompt_too_long']:,} (max_model_len {rejected['max_model_len']:,})",
        )
    if summary.get("num_capped_outputs"):
        t.add_row("outputs capped at max_model_len", f"{summary['num_capped_outputs']:,}")
    t.add_row("simulated time", f"{summary['sim_duration_s']:.1f} s")


def _window_rows(t: Table, window: dict[str, Any]) -> None:
    """The measurement window's rows (steady-state figures, 95% intervals as ±)."""
    t.add_row(
        "measurement window",
        f"{window['start_s']:,.1f}-{window['end_s']:,.1f} s, {window['num_requests']:,} requests "
        f"({window['warmup_requests']:,} warm-up cut, drain excluded)",
    )
    thr = window["throughput_rps"]
    t.add_row(
        "throughput (window)",
        f"{plus_minus(thr['value'], thr['ci95'], digits=2)} req/s (offered "
        f"{window['offered_rps']:,.2f}), {window['output_tokens_per_s']:,.0f} output tok/s",
    )
    good = window.get("goodput_rps")
    if good:
        slo = ", ".join(f"{k} <= {v:g} ms" for k, v in good["slo_ms"].items())
        t.add_row(
            "goodput (window)",
            f"{plus_minus(good['value'], good['ci95'], digits=2)} req/s "
            f"({good['good_fraction']:.1%} of requests meet {slo})",
        )
    for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
        d = window[key]
        parts = [plus_minus(d[q], d["ci95"][q], 1e3) for q in ("mean", "p50", "p90", "p99")]
        t.add_row(f"{name} mean / p50 / p90 / p99 (window)", " / ".join(parts) + " ms")
    kv = window["kv_usage"]
    t.add_row(
        "KV usage mean / p99 / max (window)",
        f"{kv['mean']:.1%} / {kv['p99']:.1%} / {kv['max']:.1%}",
    )


def _whole_run_rows(t: Table, summary: dict[str, Any]) -> None:
    """The whole run's rows (drain included): throughput, latencies (ms), preemptions,
    prefix cache, speculative decoding, KV usage, blocks, steps and wall time (s)."""
    t.add_row(
        "throughput (whole run, with drain)",
        f"{summary['throughput_rps']:.2f} req/s, "
        f"{summary['output_tokens_per_s']:,.0f} output tok/s",
    )
    t.add_row(
        "TTFT / TPOT / E2E p99 (whole run)",
        " / ".join(f"{summary[k]['p99'] * 1e3:,.1f}" for k in ("ttft_s", "tpot_s", "e2e_s"))
        + " ms",
    )
    client = summary.get("client")
    if client:
        t.add_row(
            "TTFT mean / p99, E2E p99 (client-side)",
            f"{client['ttft_s']['mean'] * 1e3:,.1f} / {client['ttft_s']['p99'] * 1e3:,.1f}, "
            f"{client['e2e_s']['p99'] * 1e3:,.1f} ms",
        )
    t.add_row(
        "preemptions",
        f"{summary['num_preemptions']:,} ({summary['preemptions_per_request']:.3f} per request)",
    )
    t.add_row("prefix cache hit rate", f"{summary['prefix_cache_hit_rate']:.1%}")
    if "spec_decode" in summary:
        t.add_row("speculative decoding", spec_decode_fact(summary["spec_decode"]))
    kv = summary["kv_usage"]
    t.add_row(
        "KV usage mean / p99 / max (whole run)",
        f"{kv['mean']:.1%} / {kv['p99']:.1%} / {kv['max']:.1%}",
    )
    t.add_row("GPU blocks x block size", f"{summary['num_gpu_blocks']:,} x {summary['block_size']}")
    t.add_row("engine steps", f"{summary['num_steps']:,}")
    t.add_row("wall time", f"{summary['wall_s']:.2f} s")


def _pd_rows(t: Table, pd: dict[str, Any]) -> None:
    """A P/D run's rows: the pools' busy fractions, TTFT's parts (ms) and the KV
    transfers."""
    parts = pd["ttft_parts_s"]
    t.add_row(
        "P/D pools: prefill / decode busy",
        f"{pd['prefill']['replicas']} x {pd['prefill']['utilization_mean']:.0%} / "
        f"{pd['decode']['replicas']} x {pd['decode']['utilization_mean']:.0%}",
    )
    t.add_row(
        "P/D TTFT mean: prefill queue, prefill, transfer, decode queue",
        ", ".join(f"{parts[k]['mean'] * 1e3:,.1f}" for k in parts) + " ms",
    )
    xfer = pd["transfers"]
    t.add_row(
        "P/D KV transfers",
        f"{xfer['count']:,}, {xfer['bytes'] / 1e9:,.2f} GB, mean / p99 "
        f"{xfer['seconds']['mean'] * 1e3:,.2f} / {xfer['seconds']['p99'] * 1e3:,.2f} ms",
    )


def summary_table(summary: dict[str, Any], out: Path) -> Table:
    """The run's summary table. Also writes one ``kvsim: warning:`` line on stderr per
    kind of request that met max_model_len (rejected prompts, capped outputs; see
    :mod:`sim.engine.input_limits`), as the run is reported."""
    _print_warnings(summary)
    t = Table(title=f"kvsim run -> {out}")
    t.add_column("metric")
    t.add_column("value", justify="right")
    _request_rows(t, summary)
    window = summary.get("window")
    if window is not None:
        _window_rows(t, window)
    _whole_run_rows(t, summary)
    if summary.get("num_replicas", 1) > 1:
        per = ", ".join(
            f"{r['num_finished']:,} ({r['prefix_cache_hit_rate']:.0%} hit)"
            for r in summary["replicas"]
        )
        t.add_row(f"replicas ({summary['router']})", per)
    pd = summary.get("pd")
    if pd is not None:
        _pd_rows(t, pd)
    verdict = summary.get("verdict")
    if verdict is not None:
        text = verdict["state"]
        if verdict["reasons"]:
            text += ": " + "; ".join(verdict["reasons"])
        t.add_row("verdict", text)
    return t
