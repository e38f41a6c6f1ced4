"""``kvsim plan``: its options (typer) and the plan field each sets (:data:`PLAN_PATHS`);
the work is in :mod:`sim.plan.cli`, imported when the command runs.

:func:`plan` is long because typer declares each option as a parameter with its help
and default; its body maps the options given onto plan fields.
"""

from __future__ import annotations

import typer

from sim.app.outdir import FORCE_HELP
from sim.cli.help_texts import ROUTER_HELP, STEPS_FORMAT_HELP, STEPS_HELP
from sim.cli.options import (
    engine_flags,
    engine_option,
    given,
    gpu_option,
    model_option,
    rate_workload_option,
    slo_option,
)

PLAN_PATHS = {
    "question": "question",
    "workload": "workload",
    "model": "model",
    "gpu": "gpu",
    "ttft_mean_s": "slo.ttft_mean_s",
    "ttft_p90_s": "slo.ttft_p90_s",
    "tpot_mean_s": "slo.tpot_mean_s",
    "tpot_p99_s": "slo.tpot_p99_s",
    "e2e_p99_s": "slo.e2e_p99_s",
    "max_preemptions_per_request": "slo.max_preemptions_per_request",
    "rate": "rate",
    "num_replicas": "num_replicas",
    "router": "router",
    "pd": "pd",
    "knob": "knob",
    "low": "search.low",
    "high": "search.high",
    "max_probes": "search.max_probes",
    "rel_tol": "search.rel_tol",
    "num_requests": "num_requests",
    "precision": "length.precision",
    "max_length_factor": "length.max_factor",
    "fixed_length": "length.fixed",
    "confirm_sojourns": "length.confirm_sojourns",
    "steps": "steps",
    "steps_format": "steps_format",
}
"""Each ``kvsim plan`` option and the plan field it sets (engine flags set
``engine.<field>``); the option's default is the field's (``tests/test_cli_help.py``)."""


def plan(
    ctx: typer.Context,
    plan_file: str = typer.Argument(
        None,
        metavar="PLAN.yaml",
        help="plan YAML: question, SLOs, workload, engine, search (docs/plan.md); flags given win",
        show_default="none: flags only",
    ),
    out: str = typer.Option(
        None,
        "--out",
        metavar="DIR",
        help="plan directory",
        show_default="plans/<workload>_<question>",
    ),
    question: str = typer.Option(
        None,
        "--question",
        help="max_rate: highest rate meeting the SLOs; min_replicas: fewest replicas at "
        "--rate; min_kv: smallest --knob at --rate",
        show_default="the plan file's; one of the two is required",
    ),
    workload: str = rate_workload_option(),
    model: str = model_option(),
    gpu: str = gpu_option(),
    ttft_mean_s: float = slo_option("ttft_mean_s"),
    ttft_p90_s: float = slo_option("ttft_p90_s"),
    tpot_mean_s: float = slo_option("tpot_mean_s"),
    tpot_p99_s: float = slo_option("tpot_p99_s"),
    e2e_p99_s: float = slo_option("e2e_p99_s"),
    max_preemptions_per_request: float = slo_option("max_preemptions_per_request"),
    rate: float = typer.Option(
        None,
        "--rate",
        metavar="REQ/S",
        help="target rate, requests per second (min_replicas: required; min_kv)",
        show_default="the workload's",
    ),
    num_replicas: int = typer.Option(
        1, "--num-replicas", help="replicas behind the router (max_rate, min_kv)"
    ),
    router: str = typer.Option("round_robin", "--router", help=ROUTER_HELP),
    pd: str = typer.Option(
        None,
        "--pd",
        metavar="prefill=P,decode=D|FILE",
        help="prefill/decode pools, as kvsim run --pd takes it: max_rate of that split, "
        "or min_replicas: the fewest P + D instances, at most these counts",
        show_default="none: colocated replicas",
    ),
    knob: str = typer.Option(
        "num_gpu_blocks",
        "--knob",
        help="min_kv: num_gpu_blocks, gpu_memory_utilization or max_num_seqs",
    ),
    low: float = typer.Option(
        None,
        "--low",
        help="low end of the search range",
        show_default="0.5 req/s, 1 replica, 16 blocks, utilization 0.1, 1 sequence",
    ),
    high: float = typer.Option(
        None,
        "--high",
        help="high end of the search range",
        show_default="open: doubles from --low; min_kv: the base configuration's value",
    ),
    max_probes: int = typer.Option(12, "--max-probes", help="most probes the search runs"),
    rel_tol: float = typer.Option(
        0.05, "--rel-tol", help="stop once the bracket is this fraction of its upper end wide"
    ),
    num_seeds: int = typer.Option(
        2, "--seeds", metavar="N", help="seeds 0..N-1 per probe; a probe passes if all do"
    ),
    num_requests: int = typer.Option(
        None,
        "--num-requests",
        metavar="N",
        help="requests per probe run to start with (runs double until they decide)",
        show_default="the workload's",
    ),
    precision: float = typer.Option(
        0.05,
        "--precision",
        help="relative half-width of an SLO metric's 95% interval that decides a run "
        "whose interval holds the bound",
    ),
    max_length_factor: int = typer.Option(
        16, "--max-length-factor", help="longest probe run, times the start length"
    ),
    fixed_length: bool = typer.Option(
        False,
        "--fixed-length/--no-fixed-length",
        help="run every probe at the start length only (a note where that is too short)",
    ),
    confirm_sojourns: float = typer.Option(
        50.0,
        "--confirm-sojourns",
        help="the answer's runs are lengthened until their measurement windows span this "
        "many mean sojourn times (0: no confirmation)",
    ),
    max_num_seqs: int = engine_option("max_num_seqs"),
    num_gpu_blocks_override: int = engine_option("num_gpu_blocks_override"),
    max_model_len: int = engine_option("max_model_len"),
    max_num_batched_tokens: int = engine_option("max_num_batched_tokens"),
    gpu_memory_utilization: float = engine_option("gpu_memory_utilization"),
    block_size: int = engine_option("block_size"),
    tensor_parallel_size: int = engine_option("tensor_parallel_size"),
    data_parallel_size: int = engine_option("data_parallel_size"),
    enable_expert_parallel: bool = engine_option("enable_expert_parallel"),
    enforce_eager: bool = engine_option("enforce_eager"),
    enable_prefix_caching: bool = engine_option("enable_prefix_caching"),
    enable_chunked_prefill: bool = engine_option("enable_chunked_prefill"),
    scheduling_policy: str = engine_option("scheduling_policy"),
    long_prefill_token_threshold: int = engine_option("long_prefill_token_threshold"),
    kv_cache_dtype: str = engine_option("kv_cache_dtype"),
    latency_model: str = engine_option("latency_model"),
    constant_step_s: float = engine_option("constant_step_s"),
    async_scheduling: bool = engine_option("async_scheduling"),
    kv_offloading_size: float = engine_option("kv_offloading_size"),
    speculative_config: str = engine_option("speculative_config"),
    steps: str = typer.Option("full", "--steps", metavar="full|thin|none", help=STEPS_HELP),
    steps_format: str = typer.Option(
        "csv", "--steps-format", metavar="csv|parquet", help=STEPS_FORMAT_HELP
    ),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Capacity search: highest rate, fewest replicas or smallest KV budget meeting SLOs.

    Options override the plan file's values (docs/plan.md lists its fields). --out may
    name a new directory, an empty one, or an earlier kvsim plan directory (probed
    again); anything else needs --force."""
    from sim.plan.cli import plan_command

    engine = engine_flags(ctx)
    skip = ("plan_file", "out", "force", *engine)
    values = given(ctx, {k: v for k, v in ctx.params.items() if k not in skip})
    overrides = {f"engine.{name}": value for name, value in engine.items()}
    for name, value in values.items():
        if name == "num_seeds":
            overrides["seeds"] = list(range(value)) if value is not None and value > 0 else value
        else:
            overrides[PLAN_PATHS[name]] = value
    raise typer.Exit(plan_command(plan_file, out, overrides, force=force))
