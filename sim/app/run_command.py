"""``kvsim run``: one simulation from a workload, model, GPU and engine settings.

Prints a summary table and writes the run directory. Bad input: one message naming
the file/flag and field on stderr, exit 2. Internal errors exit 1.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from calibrate.use_calibration import calibration_defaults
from reports.html import plus_minus
from reports.run_facts import spec_decode_fact
from sim.app.engine_config import load_engine_config
from sim.app.outdir import OutputError, check_output
from sim.app.pd_config import parse_pd
from sim.app.progress import progress_bar
from sim.app.run import (
    DEFAULT_GPU,
    DEFAULT_MODEL,
    DEFAULT_WORKLOAD,
    NothingServed,
    RunSpec,
    run,
)
from sim.app.setup import resolve_run
from sim.errors import SimulationStuck
from sim.records.goodput import parse_goodput
from sim.records.step_parquet import check_format as check_steps_format
from sim.records.step_thin import check_mode as check_steps_mode
from sim.signals import exit_status, interrupted
from workloads.overrides import WorkloadOverrides


def _fail(message: str) -> int:
    print(f"kvsim: error: {message}", file=sys.stderr)
    return 2


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


def _summary_table(summary: dict[str, Any], out: Path) -> Table:
    """The run's summary table. Also writes one ``kvsim: warning:`` line on stderr per
    kind of request that met max_model_len (rejected prompts, capped outputs; see
    :mod:`sim.engine.input_limits`), as the run is reported."""
    from sim.engine.input_limits import warnings as limit_warnings

    for line in limit_warnings(summary):
        print(f"kvsim: warning: {line}", file=sys.stderr)
    for line in (summary.get("window") or {}).get("warnings", []):
        print(f"kvsim: warning: measurement window: {line}", file=sys.stderr)
    t = Table(title=f"kvsim run -> {out}")
    t.add_column("metric")
    t.add_column("value", justify="right")
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
    window = summary.get("window")
    if window is not None:
        _window_rows(t, window)
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
    if summary.get("num_replicas", 1) > 1:
        per = ", ".join(
            f"{r['num_finished']:,} ({r['prefix_cache_hit_rate']:.0%} hit)"
            for r in summary["replicas"]
        )
        t.add_row(f"replicas ({summary['router']})", per)
    pd = summary.get("pd")
    if pd is not None:
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
    verdict = summary.get("verdict")
    if verdict is not None:
        text = verdict["state"]
        if verdict["reasons"]:
            text += ": " + "; ".join(verdict["reasons"])
        t.add_row("verdict", text)
    return t


def run_command(
    workload: str | None,
    engine_file: str | None,
    model: str | None,
    gpu: str | None,
    calibration: str | None,
    seed: int | None,
    out: str | None,
    decisions: bool,
    check: bool,
    engine_overrides: dict[str, Any],
    num_replicas: int | None = None,
    router: str | None = None,
    pd: str | None = None,
    fast_forward: bool = True,
    force: bool = False,
    workload_overrides: WorkloadOverrides | None = None,
    goodput: list[str] | None = None,
    steps: str = "full",
    steps_format: str = "csv",
    export: list[str] | None = None,
    report: bool = True,
) -> int:
    """Body of ``kvsim run``; returns the exit status.

    ``model``, ``gpu`` and the engine's ``tensor_parallel_size`` left out (None) are
    the calibration file's when there is one, else the defaults; ``num_replicas`` left
    out is the engine's ``data_parallel_size`` (1 by default: one engine).
    ``workload_overrides``: ``--rate``, ``--num-requests``, ``--duration``;
    ``goodput``: ``--goodput KEY:MS`` items (:func:`sim.records.goodput.parse_goodput`);
    ``export``: formats ``--export`` asked for (:mod:`sim.interop.cli`), written into
    the run directory once it is complete; ``report``: False skips plots and
    ``report.html`` (``--no-report``); ``pd``: ``--pd``'s text
    (:func:`sim.app.pd_config.parse_pd`), None: colocated replicas."""
    from sim.interop.formats import check_format

    try:
        for fmt in export or []:
            check_format(fmt, "--export")
        goodput_slo = parse_goodput(goodput)
        check_steps_mode(steps, "--steps")
        check_steps_format(steps_format, "--steps-format")
        from_file = calibration_defaults(calibration) if calibration else {}
        tp = from_file.get("tensor_parallel_size")
        engine = load_engine_config(
            engine_file, engine_overrides, {"tensor_parallel_size": tp} if tp else None
        )
        spec = RunSpec(
            workload=workload or DEFAULT_WORKLOAD,
            model=model or from_file.get("model") or DEFAULT_MODEL,
            gpu=gpu or from_file.get("gpu") or DEFAULT_GPU,
            engine=engine,
            seed=seed,
            calibration=calibration,
            decisions=decisions,
            check=check,
            num_replicas=engine.data_parallel_size if num_replicas is None else num_replicas,
            router=router or "round_robin",
            fast_forward=fast_forward,
            workload_overrides=workload_overrides,
            goodput=goodput_slo,
            steps=steps,
            steps_format=steps_format,
            pd=None if pd is None else parse_pd(pd),
        )
        resolved = resolve_run(spec)
    except ValueError as e:
        return _fail(str(e))
    out_dir = (
        Path(out)
        if out
        else Path("runs")
        / (f"{Path(resolved.workload_name).stem}_{resolved.model_name}_{resolved.gpu_name}")
    )
    try:
        target = check_output(out_dir, "run", force=force)
    except OutputError as e:
        return _fail(str(e))
    console = Console(stderr=True)
    total = resolved.workload.num_requests
    try:
        if console.is_terminal:
            with progress_bar(console) as progress:
                task = progress.add_task("simulating", total=total, unit="req")
                summary = run(
                    spec,
                    out_dir,
                    resolved=resolved,
                    on_progress=lambda n: progress.advance(task, n),
                    target=target,
                    render=report,
                )
        else:
            summary = run(spec, out_dir, resolved=resolved, target=target, render=report)
    except KeyboardInterrupt as e:
        before = "the earlier run there is unchanged" if target.exists else "nothing was written"
        print(f"kvsim: {interrupted(e)}; no run directory at {out_dir} ({before})", file=sys.stderr)
        return exit_status(e)
    except OutputError as e:
        return _fail(str(e))
    except NothingServed as e:
        return _fail(str(e))
    except SimulationStuck as e:
        return _fail(
            f"{e}; give the KV cache more blocks (--gpu-memory-utilization, "
            "--num-gpu-blocks-override) or lower --max-model-len"
        )
    Console().print(_summary_table(summary, out_dir))
    if export:
        from sim.interop.cli import export_run

        try:
            for path in export_run(target.path, list(dict.fromkeys(export))):
                print(f"kvsim: wrote {path}", file=sys.stderr)
        except (ValueError, OSError) as e:
            return _fail(f"the run is complete, but its export failed: {e}")
    return 0
