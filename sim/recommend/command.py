"""The ``kvsim recommend`` command's options (typer); the work is in
:mod:`sim.recommend.cli`, imported when the command runs.

Each option sets one field of the recommend spec (:data:`RECOMMEND_PATHS`); a list
option takes comma-separated values (``--gpus A100-80GB,H100-SXM``). Options given
replace the spec file's values; options left at their defaults do not.
"""

from __future__ import annotations

import typer

from sim.app.outdir import FORCE_HELP
from sim.cli.options import given, model_option, rate_workload_option, slo_option

RECOMMEND_PATHS = {
    "model": "model",
    "workload": "workload",
    "target_rate": "target_rate",
    "objective": "objective",
    "ttft_mean_s": "slo.ttft_mean_s",
    "ttft_p90_s": "slo.ttft_p90_s",
    "tpot_mean_s": "slo.tpot_mean_s",
    "tpot_p99_s": "slo.tpot_p99_s",
    "e2e_p99_s": "slo.e2e_p99_s",
    "max_preemptions_per_request": "slo.max_preemptions_per_request",
    "gpus": "space.gpus",
    "tensor_parallel_size": "space.tensor_parallel_size",
    "max_num_seqs": "space.max_num_seqs",
    "max_num_batched_tokens": "space.max_num_batched_tokens",
    "gpu_memory_utilization": "space.gpu_memory_utilization",
    "kv_cache_dtype": "space.kv_cache_dtype",
    "enable_prefix_caching": "space.enable_prefix_caching",
    "max_model_len": "engine.max_model_len",
    "prices": "prices",
    "router": "router",
    "top": "top",
    "num_requests": "search.num_requests",
    "rel_tol": "search.rel_tol",
    "max_probes": "search.max_probes",
    "max_length_factor": "search.length.max_factor",
    "bound_slack": "search.bound_slack",
    "verify_requests": "verify.num_requests",
    "keep_runs": "keep_runs",
}
"""Each option and the spec field it sets (``tests/test_recommend_cli.py`` checks that
the defaults shown are the spec's)."""

LISTS = {
    "gpus": str,
    "tensor_parallel_size": int,
    "max_num_seqs": int,
    "max_num_batched_tokens": int,
    "gpu_memory_utilization": float,
    "kv_cache_dtype": str,
    "enable_prefix_caching": bool,
}
"""The comma-separated options and the type of each value."""

SPACE = "Search space (comma-separated values)"
SEARCH = "Per-candidate search"


def _axis(flag: str, what: str, shown: str) -> typer.models.OptionInfo:
    return typer.Option(
        None, flag, metavar="V,V,...", help=what, show_default=shown, rich_help_panel=SPACE
    )


def recommend(
    ctx: typer.Context,
    spec_file: str = typer.Argument(
        None,
        metavar="RECOMMEND.yaml",
        help="recommend spec: model, workload, SLOs, target rate, search space, prices "
        "(docs/recommend.md); options given win",
        show_default="none: options only",
    ),
    out: str = typer.Option(
        None,
        "--out",
        metavar="DIR",
        help="recommend directory (resumed when it is an earlier one)",
        show_default="recommendations/<model>_<workload>",
    ),
    jobs: int = typer.Option(
        None, "--jobs", help="candidates searched at once, in processes", show_default="CPUs"
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="print every candidate with its analytic bounds and what would be pruned; "
        "simulate and write nothing",
    ),
    model: str = model_option(),
    workload: str = rate_workload_option(),
    target_rate: float = typer.Option(
        None,
        "--target-rate",
        metavar="REQ/S",
        help="requests per second the deployment must serve",
        show_default="none: rank by goodput per GPU",
    ),
    objective: str = typer.Option(
        None,
        "--objective",
        help="cost: cheapest deployment at the target rate (GPUs where a price is "
        "missing); goodput_per_gpu: most req/s per GPU",
        show_default="cost with a target rate, else goodput_per_gpu",
    ),
    ttft_mean_s: float = slo_option("ttft_mean_s"),
    ttft_p90_s: float = slo_option("ttft_p90_s"),
    tpot_mean_s: float = slo_option("tpot_mean_s"),
    tpot_p99_s: float = slo_option("tpot_p99_s"),
    e2e_p99_s: float = slo_option("e2e_p99_s"),
    max_preemptions_per_request: float = slo_option("max_preemptions_per_request"),
    gpus: str = _axis("--gpus", "catalog GPUs (kvsim list) or GPU YAMLs", "H100-SXM"),
    tensor_parallel_size: str = _axis(
        "--tensor-parallel-size", "tensor-parallel sizes", "1,2,4,8 where the model allows"
    ),
    max_num_seqs: str = _axis("--max-num-seqs", "max_num_seqs values", "vLLM's default"),
    max_num_batched_tokens: str = _axis(
        "--max-num-batched-tokens", "max_num_batched_tokens values", "vLLM's default"
    ),
    gpu_memory_utilization: str = _axis(
        "--gpu-memory-utilization", "gpu_memory_utilization values", "0.92"
    ),
    kv_cache_dtype: str = _axis("--kv-cache-dtype", "KV cache dtypes: auto, fp8", "auto"),
    enable_prefix_caching: str = _axis(
        "--enable-prefix-caching", "prefix caching: true, false", "true"
    ),
    max_model_len: int = typer.Option(
        None,
        "--max-model-len",
        help="context length of every candidate, tokens",
        show_default="the model's",
    ),
    prices: str = typer.Option(
        None,
        "--prices",
        metavar="FILE",
        help="YAML of USD per GPU-hour by GPU name (examples/gpu-prices.yaml)",
        show_default="the spec's prices, else each GPU YAML's price_per_gpu_hour",
    ),
    router: str = typer.Option(
        "round_robin",
        "--router",
        help="router of the cluster checks: round_robin, least_outstanding, least_kv or "
        "prefix_aware",
    ),
    top: int = typer.Option(5, "--top", help="candidates ranked, checked and shown"),
    num_requests: int = typer.Option(
        400,
        "--num-requests",
        metavar="N",
        help="requests per probe run to start with (runs double until they decide)",
        rich_help_panel=SEARCH,
    ),
    num_seeds: int = typer.Option(
        1, "--seeds", metavar="N", help="seeds 0..N-1 per probe", rich_help_panel=SEARCH
    ),
    rel_tol: float = typer.Option(
        0.1,
        "--rel-tol",
        help="stop a search once its bracket is this narrow",
        rich_help_panel=SEARCH,
    ),
    max_probes: int = typer.Option(
        10, "--max-probes", help="most probes per candidate", rich_help_panel=SEARCH
    ),
    max_length_factor: int = typer.Option(
        4,
        "--max-length-factor",
        help="longest probe run, times the start length",
        rich_help_panel=SEARCH,
    ),
    bound_slack: float = typer.Option(
        1.25,
        "--bound-slack",
        help="the analytic rate bound is loosened by this factor before it prunes or caps a search",
        rich_help_panel=SEARCH,
    ),
    verify_requests: int = typer.Option(
        10_000, "--verify-requests", metavar="N", help="requests of each cluster check"
    ),
    keep_runs: bool = typer.Option(
        False,
        "--keep-runs/--no-keep-runs",
        help="keep every probe run's steps.csv and requests.csv (large)",
    ),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Which GPU, tensor-parallel size, engine flags and replica count serve a workload
    within its SLOs at the lowest cost: a ranked table, a Pareto chart, vllm serve lines.

    Options override the spec file's values (docs/recommend.md). --out may name a new
    directory, an empty one, or an earlier kvsim recommend directory (resumed: cached
    searches are reused); anything else needs --force."""
    from sim.recommend.cli import recommend_command

    skip = ("spec_file", "out", "force", "jobs", "dry_run")
    values = given(ctx, {k: v for k, v in ctx.params.items() if k not in skip})
    raise typer.Exit(recommend_command(spec_file, out, values, jobs, dry_run, force))
