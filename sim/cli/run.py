"""``kvsim run``: its options (typer); the work is in :mod:`sim.app.run_command`, imported when
the command runs.

:func:`run` is long because typer declares each option as a parameter with its help and
default; its body is a few lines that pass them on. Its docstring is the command's help.
"""

from __future__ import annotations

import typer

from sim.app.outdir import FORCE_HELP
from sim.cli.help_texts import ROUTER_HELP, STEPS_FORMAT_HELP, STEPS_HELP
from sim.cli.options import (
    OUTPUT_PANEL,
    WORKLOAD_PANEL,
    calibration_option,
    engine_flags,
    engine_option,
    given,
    gpu_option,
    model_option,
)
from sim.defaults import DEFAULT_WORKLOAD

WORKLOAD_HELP = (
    "preset name (kvsim list), workload YAML, or trace (.jsonl kvsim or Mooncake, "
    ".csv Azure or BurstGPT)"
)
EXPORT_OPTION = typer.Option(
    None,
    "--export",
    metavar="FORMAT",
    help="also write the run as vllm-bench (vllm-bench.json: vllm bench serve "
    "--save-result's JSON) or guidellm (guidellm-benchmarks.json); repeatable; "
    "docs/interop.md",
    show_default="none",
    rich_help_panel=OUTPUT_PANEL,
)


def run(
    ctx: typer.Context,
    workload: str = typer.Argument(DEFAULT_WORKLOAD, metavar="WORKLOAD", help=WORKLOAD_HELP),
    num_requests: int = typer.Option(
        None,
        "--num-requests",
        metavar="N",
        help="send N requests (each session turn is one), replacing the workload's "
        "num_requests or duration_s",
        show_default="the workload's",
        rich_help_panel=WORKLOAD_PANEL,
    ),
    rate: float = typer.Option(
        None,
        "--rate",
        metavar="REQ/S",
        help="arrival rate in requests per second (sessions per second for a session "
        "workload), replacing arrival.rate; poisson, gamma and constant arrivals only",
        show_default="the workload's",
        rich_help_panel=WORKLOAD_PANEL,
    ),
    duration: float = typer.Option(
        None,
        "--duration",
        metavar="SECONDS",
        help="stop arrivals at this simulated time: nothing is sent at or after it, what "
        "was sent is served to the end; replaces num_requests",
        show_default="the workload's",
        rich_help_panel=WORKLOAD_PANEL,
    ),
    engine: str = typer.Option(
        None,
        "--engine",
        metavar="FILE",
        help="YAML file of engine arguments (vLLM names); flags given win",
        show_default="none: vLLM's defaults",
    ),
    model: str = model_option(
        "catalog model (kvsim list) or a Hugging Face config.json; with "
        "--calibration: the file's model"
    ),
    gpu: str = gpu_option(
        "catalog GPU (kvsim list) or a GPU YAML; with --calibration: the file's GPU"
    ),
    calibration: str = calibration_option(
        "calibration file from kvsim calibrate: measured memory terms and fitted step "
        "times; gives model, GPU and tensor-parallel size unless those are given",
        "none: catalog figures, roofline step times",
    ),
    seed: int = typer.Option(
        None,
        "--seed",
        help="seed of the workload's random draws",
        show_default="the workload's, 0 for a trace",
        rich_help_panel=WORKLOAD_PANEL,
    ),
    out: str = typer.Option(
        None,
        "--out",
        metavar="DIR",
        help="run directory to write (a new or empty one, or an earlier kvsim run)",
        show_default="runs/<workload>_<model>_<gpu>",
        rich_help_panel=OUTPUT_PANEL,
    ),
    decisions: bool = typer.Option(
        False,
        "--decisions",
        help="also write decisions.jsonl: what each step scheduled",
        rich_help_panel=OUTPUT_PANEL,
    ),
    check: bool = typer.Option(
        False, "--check", help="check kvcore's invariants after every step (slow)"
    ),
    fast_forward: bool = typer.Option(
        True,
        "--fast-forward/--no-fast-forward",
        help="advance decode-only stretches at once (identical results)",
    ),
    num_replicas: int = typer.Option(
        None,
        "--num-replicas",
        help="replicas behind the router (each DP rank is one)",
        show_default="--data-parallel-size (1)",
    ),
    router: str = typer.Option("round_robin", "--router", help=ROUTER_HELP),
    pd: str = typer.Option(
        None,
        "--pd",
        metavar="prefill=P,decode=D",
        help="prefill/decode disaggregation: P prefill and D decode instances (NIXL "
        "connector, kv_producer / kv_consumer) behind a proxy, --router picking within "
        "each pool; optional kv_transfer_gbps=G, kv_transfer_latency_us=U override the "
        "GPU's link",
        show_default="none: colocated replicas",
    ),
    goodput: list[str] = typer.Option(  # noqa: B008 (typer reads its options so)
        None,
        "--goodput",
        metavar="KEY:MS",
        help="a per-request SLO for goodput, as vllm bench serve takes it: ttft, tpot or "
        "e2el and milliseconds (repeat for several); summary.json's window then has "
        "goodput_rps",
        show_default="none: no goodput",
        rich_help_panel=OUTPUT_PANEL,
    ),
    block_size: int = engine_option("block_size"),
    gpu_memory_utilization: float = engine_option("gpu_memory_utilization"),
    num_gpu_blocks_override: int = engine_option("num_gpu_blocks_override"),
    max_num_seqs: int = engine_option("max_num_seqs"),
    max_num_batched_tokens: int = engine_option("max_num_batched_tokens"),
    max_model_len: int = engine_option("max_model_len"),
    tensor_parallel_size: int = engine_option(
        "tensor_parallel_size", help_suffix="; with --calibration: the file's"
    ),
    data_parallel_size: int = engine_option("data_parallel_size"),
    enable_expert_parallel: bool = engine_option("enable_expert_parallel"),
    enforce_eager: bool = engine_option("enforce_eager"),
    long_prefill_token_threshold: int = engine_option("long_prefill_token_threshold"),
    enable_chunked_prefill: bool = engine_option("enable_chunked_prefill"),
    enable_prefix_caching: bool = engine_option("enable_prefix_caching"),
    scheduling_policy: str = engine_option("scheduling_policy"),
    kv_cache_dtype: str = engine_option("kv_cache_dtype"),
    latency_model: str = engine_option("latency_model"),
    constant_step_s: float = engine_option("constant_step_s"),
    async_scheduling: bool = engine_option("async_scheduling"),
    kv_offloading_size: float = engine_option("kv_offloading_size"),
    speculative_config: str = engine_option("speculative_config"),
    steps: str = typer.Option(
        "full",
        "--steps",
        metavar="full|thin|none",
        help=STEPS_HELP,
        rich_help_panel=OUTPUT_PANEL,
    ),
    steps_format: str = typer.Option(
        "csv",
        "--steps-format",
        metavar="csv|parquet",
        help=STEPS_FORMAT_HELP,
        rich_help_panel=OUTPUT_PANEL,
    ),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP, rich_help_panel=OUTPUT_PANEL),
    export: list[str] = EXPORT_OPTION,
    report: bool = typer.Option(
        True,
        "--report/--no-report",
        help="write the plots and report.html; --no-report skips them for batch use "
        "(kvsim report DIR renders them later from the records)",
        rich_help_panel=OUTPUT_PANEL,
    ),
) -> None:
    """Simulate vLLM replicas serving a workload; write summary, records, plots, report.

    --out may name a new directory, an empty one, or an earlier kvsim run directory
    (replaced whole, atomically); anything else needs --force."""
    from sim.app import trace_ahead

    trace_ahead.start(workload)  # read while the run's other modules import
    try:
        from sim.app.run_command import run_command
        from workloads.overrides import WorkloadOverrides

        named = given(ctx, {"model": model, "gpu": gpu})
        status = run_command(
            workload,
            engine,
            named["model"],
            named["gpu"],
            calibration,
            seed,
            out,
            decisions,
            check,
            engine_flags(ctx),
            num_replicas=num_replicas,
            router=router,
            pd=pd,
            fast_forward=fast_forward,
            force=force,
            workload_overrides=WorkloadOverrides(
                rate=rate, num_requests=num_requests, duration_s=duration
            ),
            goodput=goodput,
            steps=steps,
            steps_format=steps_format,
            export=export or [],
            report=report,
        )
    finally:
        trace_ahead.stop_all()  # one the run never took (it failed before its read)
    raise typer.Exit(status)
