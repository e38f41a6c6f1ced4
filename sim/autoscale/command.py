"""The ``kvsim autoscale`` command's options (typer) and body: replicas over time for a
time-varying workload (:mod:`sim.autoscale.runner`)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from pydantic import ValidationError

from sim.app.outdir import FORCE_HELP, OutputError
from sim.cli.options import SLO_FLAGS, engine_flags, engine_option, slo_option
from sim.defaults import DEFAULT_GPU, DEFAULT_MODEL

SCALING = "Scaling"


def autoscale(
    ctx: typer.Context,
    workload: str = typer.Argument(
        ..., metavar="WORKLOAD", help="open-loop workload YAML (time-varying arrivals) or trace"
    ),
    out: str = typer.Option(
        None,
        "--out",
        metavar="DIR",
        show_default="autoscale/<workload>",
        help="directory for autoscale.json and the two cluster runs",
    ),
    model: str = typer.Option(
        DEFAULT_MODEL, "--model", metavar="NAME|PATH", help="catalog model or config.json path"
    ),
    gpu: str = typer.Option(
        DEFAULT_GPU, "--gpu", metavar="NAME|PATH", help="catalog GPU or GPU YAML path"
    ),
    engine: str = typer.Option(
        None,
        "--engine",
        metavar="FILE",
        help="YAML file of engine arguments (vLLM names); flags given win",
        show_default="none: vLLM's defaults",
    ),
    seed: int = typer.Option(
        None, "--seed", help="the workload's seed", show_default="the workload's"
    ),
    router: str = typer.Option(
        "round_robin", "--router", help="how requests pick among the routable replicas"
    ),
    replica_rate: float = typer.Option(
        None,
        "--replica-rate",
        metavar="REQ/S",
        rich_help_panel=SCALING,
        help="one replica's capacity within the SLOs (e.g. a plan's max_rate answer)",
        show_default="none: plan it with the SLO flags (max_rate, Poisson arrivals, same mix)",
    ),
    window_s: float = typer.Option(
        300.0, "--window-s", rich_help_panel=SCALING, help="seconds per window of the arrival rate"
    ),
    headroom: float = typer.Option(
        0.0,
        "--headroom",
        rich_help_panel=SCALING,
        help="spare capacity: replicas for rate x (1 + headroom)",
    ),
    min_replicas: int = typer.Option(
        1, "--min-replicas", rich_help_panel=SCALING, help="never fewer replicas than this"
    ),
    scale_up_delay_s: float = typer.Option(
        None,
        "--scale-up-delay-s",
        rich_help_panel=SCALING,
        help="seconds from asking for a replica to its first request (start, load, warm-up)",
        show_default="weights per GPU at 2 GB/s + 60 s",
    ),
    scale_down_delay_s: float = typer.Option(
        0.0,
        "--scale-down-delay-s",
        rich_help_panel=SCALING,
        help="seconds a replica no longer needed still takes requests before draining",
    ),
    lead_s: float = typer.Option(
        0.0,
        "--lead-s",
        rich_help_panel=SCALING,
        help="ask for a replica this many seconds before its window (0: at the window)",
    ),
    plan_num_requests: int = typer.Option(
        None,
        "--plan-num-requests",
        metavar="N",
        rich_help_panel=SCALING,
        help="start length of the capacity plan's probe runs",
        show_default="plan's",
    ),
    ttft_mean_s: float = slo_option("ttft_mean_s"),
    ttft_p90_s: float = slo_option("ttft_p90_s"),
    tpot_mean_s: float = slo_option("tpot_mean_s"),
    tpot_p99_s: float = slo_option("tpot_p99_s"),
    e2e_p99_s: float = slo_option("e2e_p99_s"),
    max_preemptions_per_request: float = slo_option("max_preemptions_per_request"),
    tensor_parallel_size: int = engine_option("tensor_parallel_size"),
    max_num_seqs: int = engine_option("max_num_seqs"),
    max_num_batched_tokens: int = engine_option("max_num_batched_tokens"),
    gpu_memory_utilization: float = engine_option("gpu_memory_utilization"),
    latency_model: str = engine_option("latency_model"),
    constant_step_s: float = engine_option("constant_step_s"),
    async_scheduling: bool = engine_option("async_scheduling"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="print the schedule (needs --replica-rate); simulate nothing"
    ),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Replicas over time: a replica schedule from the workload's arrival rate, window by
    window, and the autoscaled cluster that follows it simulated against one of the peak
    size: SLOs per window, GPU-hours of both."""
    from sim.app.engine_config import load_engine_config
    from sim.autoscale.report import print_report
    from sim.autoscale.runner import AutoscaleSpec, run_autoscale
    from sim.records.slo import SLO

    values = engine_flags(ctx)
    bounds = {k: ctx.params[k] for k in SLO_FLAGS if ctx.params[k] is not None}
    try:
        spec = AutoscaleSpec(
            workload=workload, model=model, gpu=gpu,
            engine=load_engine_config(engine, values), seed=seed, router=router,
            slo=SLO(**bounds) if bounds else None, replica_rate=replica_rate,
            window_s=window_s, headroom=headroom, min_replicas=min_replicas,
            scale_up_delay_s=scale_up_delay_s, scale_down_delay_s=scale_down_delay_s,
            lead_s=lead_s, plan_num_requests=plan_num_requests,
        )  # fmt: skip
        target = Path(out) if out else Path("autoscale") / Path(workload).stem
        doc = run_autoscale(spec, target, force=force, dry_run=dry_run)
    except (ValueError, OutputError, ValidationError) as exc:
        print(f"kvsim: error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    print_report(doc, target)
