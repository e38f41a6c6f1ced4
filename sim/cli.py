"""The ``kvsim`` command line (typer).

Exit status: 0 on success, 2 on bad input (one message on stderr, no traceback),
1 on an internal error. Every option shows its help and default in ``--help``; engine
flags come from :mod:`sim.cli_options`.
"""

from __future__ import annotations

import gc

import typer

from kvcore import VLLM_VERSION, __version__
from sim.autoscale.command import autoscale as _autoscale
from sim.cli_options import (
    OUTPUT_PANEL,
    TRACE_FIT_PANEL,
    WORKLOAD_PANEL,
    KvsimCommand,
    KvsimGroup,
    engine_flags,
    engine_option,
    given,
    slo_option,
)
from sim.conformance import DEFAULT_SEED
from sim.defaults import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_WORKLOAD
from sim.outdir import FORCE_HELP
from sim.recommend.command import recommend as _recommend
from sim.signals import install as install_signal_handlers

STEPS_HELP = (
    "steps.csv: full (a row per engine step), thin (at most 20,000 rows: steps bucketed "
    "by time, levels sampled, counts summed) or none (not written); for long runs"
)
STEPS_FORMAT_HELP = (
    "csv (steps.csv) or parquet (steps.parquet: the same columns at full precision; "
    "needs pyarrow, kvsim's optional parquet extra)"
)

app = typer.Typer(
    name="kvsim",
    cls=KvsimGroup,
    no_args_is_help=True,
    add_completion=False,
    help="Capacity planning for vLLM-style LLM serving, on vLLM V1's own KV-cache and "
    f"scheduling logic (mirrors vLLM {VLLM_VERSION}). Documentation: docs/README.md in "
    "the repository.",
)

WORKLOAD_HELP = (
    "preset name (kvsim list), workload YAML, or trace (.jsonl kvsim or Mooncake, "
    ".csv Azure or BurstGPT)"
)
ROUTER_HELP = "round_robin, least_outstanding, least_kv or prefix_aware"
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


@app.callback()
def _root() -> None:
    """kvsim: simulate vLLM replicas block for block."""


@app.command(cls=KvsimCommand)
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
    model: str = typer.Option(
        DEFAULT_MODEL,
        "--model",
        metavar="NAME|PATH",
        help="catalog model (kvsim list) or a Hugging Face config.json; with "
        "--calibration: the file's model",
    ),
    gpu: str = typer.Option(
        DEFAULT_GPU,
        "--gpu",
        metavar="NAME|PATH",
        help="catalog GPU (kvsim list) or a GPU YAML; with --calibration: the file's GPU",
    ),
    calibration: str = typer.Option(
        None,
        "--calibration",
        metavar="FILE",
        help="calibration file from kvsim calibrate: measured memory terms and fitted step "
        "times; gives model, GPU and tensor-parallel size unless those are given",
        show_default="none: catalog figures, roofline step times",
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
    from sim.run_cli import run_command
    from workloads.overrides import WorkloadOverrides

    named = given(ctx, {"model": model, "gpu": gpu})
    raise typer.Exit(
        run_command(
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
    )


@app.command(cls=KvsimCommand)
def export(
    run_dir: str = typer.Argument(..., metavar="RUN_DIR", help="a kvsim run directory"),
    fmt: str = typer.Option(
        "vllm-bench",
        "--format",
        help="vllm-bench (vllm bench serve --save-result's JSON, vLLM 0.33.0) or guidellm "
        "(GuideLLM's benchmarks.json, report version 2)",
    ),
    out: str = typer.Option(
        None,
        "--out",
        metavar="FILE",
        help="file to write (- is stdout); an existing file is replaced only if it is a "
        "kvsim export",
        show_default="RUN_DIR/vllm-bench.json or RUN_DIR/guidellm-benchmarks.json",
    ),
    metric_percentiles: str = typer.Option(
        "99",
        "--metric-percentiles",
        help="vllm-bench: comma-separated percentiles of TTFT, TPOT, ITL and E2EL, as "
        "vllm bench serve's option",
    ),
) -> None:
    """Write a finished run as a vllm bench serve result or a GuideLLM report
    (docs/interop.md: which fields are filled, approximated, left out)."""
    from sim.interop.cli import export_command

    raise typer.Exit(export_command(run_dir, fmt, out, metric_percentiles))


@app.command(cls=KvsimCommand)
def compare(
    real: str = typer.Argument(
        ...,
        metavar="REAL",
        help="a real result: vllm bench serve --save-result JSON, GuideLLM benchmarks.json, "
        "or an LLMServingSim run directory (requests.jsonl)",
    ),
    sim_dir: str = typer.Argument(..., metavar="SIM_DIR", help="the kvsim run directory"),
    benchmark: int = typer.Option(
        0,
        "--benchmark",
        metavar="N",
        help="which result of a file holding several (GuideLLM benchmarks, appended vLLM results)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print the rows as one JSON object"),
) -> None:
    """Print real against simulated figures side by side with signed errors (sim - real,
    % of real), each computed by the real tool's definition."""
    from sim.interop.cli import compare_command

    raise typer.Exit(compare_command(real, sim_dir, benchmark, as_json))


@app.command()
def replay(
    ctx: typer.Context,
    trace: str = typer.Argument(
        ...,
        help="replay trace: JSON list of {request_id, arrival_step, prompt_token_ids, "
        "max_tokens} objects (optional: priority, cache_salt, lora_id); docs/traces.md",
    ),
    out: str = typer.Option("-", "--out", help="output JSONL file; - is stdout"),
    async_scheduling: bool = typer.Option(
        False,
        "--async-scheduling/--no-async-scheduling",
        help="vLLM's async engine loop: AsyncScheduler behind a batch queue of 2; "
        "a step's output is applied after the next step is scheduled",
    ),
    block_size: int = typer.Option(16, "--block-size", help="tokens per KV block"),
    num_gpu_blocks: int = typer.Option(
        1024, "--num-gpu-blocks", help="KV blocks in the pool, including the null block"
    ),
    max_num_seqs: int = typer.Option(128, "--max-num-seqs", help="most requests running at once"),
    max_num_batched_tokens: int = typer.Option(
        2048, "--max-num-batched-tokens", help="token budget of one step"
    ),
    enable_chunked_prefill: bool = typer.Option(
        True,
        "--enable-chunked-prefill/--no-enable-chunked-prefill",
        help="split prompts longer than the step's remaining budget",
    ),
    enable_prefix_caching: bool = typer.Option(
        True,
        "--enable-prefix-caching/--no-enable-prefix-caching",
        help="reuse cached blocks of identical prefixes",
    ),
    long_prefill_token_threshold: int = typer.Option(
        0,
        "--long-prefill-token-threshold",
        help="most prompt tokens per request per step (0: no limit)",
    ),
    policy: str = typer.Option("fcfs", "--scheduling-policy", help="fcfs or priority"),
    watermark: float = typer.Option(
        0.0, "--watermark", help="fraction of blocks kept free when admitting requests"
    ),
    scheduler_reserve_full_isl: bool = typer.Option(
        True,
        "--reserve-full-isl/--no-reserve-full-isl",
        help="admit a request only if its whole sequence fits in free blocks",
    ),
    kv_groups: str = typer.Option(
        "full",
        "--kv-groups",
        help="KV cache groups, comma-separated: full, sliding_window, chunked_local",
    ),
    sliding_window: int = typer.Option(
        None,
        "--sliding-window",
        help="tokens of a sliding_window group's window",
        show_default="none (needed with a sliding_window group)",
    ),
    attention_chunk_size: int = typer.Option(
        None,
        "--attention-chunk-size",
        help="tokens per chunk of a chunked_local group",
        show_default="none (needed with a chunked_local group)",
    ),
    prefix_caching_hash_algo: str = typer.Option(
        "sha256",
        "--prefix-caching-hash-algo",
        help="sha256, sha256_cbor, xxhash or xxhash_cbor",
    ),
    max_model_len: int = typer.Option(
        None,
        "--max-model-len",
        help="longest sequence, tokens",
        show_default="the trace's largest prompt + max_tokens",
    ),
    sample_token_id: int = typer.Option(
        7, "--sample-token-id", help="the token the fake model samples"
    ),
    none_hash_seed: str = typer.Option(
        "vllm-none-hash",
        "--none-hash-seed",
        help="seed of the first block's parent hash (vLLM: PYTHONHASHSEED if set)",
    ),
    num_lookahead_tokens: int = typer.Option(
        0, "--num-lookahead-tokens", help="speculative slots reserved per request per step"
    ),
    num_speculative_tokens: int = typer.Option(
        0,
        "--num-speculative-tokens",
        help="speculative decoding: drafts per request per step (0: off); the fake model "
        "drafts and accepts by kvcore/replay_spec.py's rules",
    ),
    speculative_method: str = typer.Option(
        "ngram",
        "--speculative-method",
        help="speculative method: ngram, ngram_gpu, draft_model, eagle or eagle3",
    ),
    enable_kv_cache_events: bool = typer.Option(
        False, "--kv-events/--no-kv-events", help="add KV cache events to each step"
    ),
    dump_block_tables: bool = typer.Option(
        False,
        "--dump-block-tables/--no-dump-block-tables",
        help="add each scheduled request's block table",
    ),
) -> None:
    """Replay a step-indexed trace through kvcore's V1 scheduler with a fake model; one
    JSON line per engine step (what vLLM 0.33.0 schedules)."""
    # Each option's parameter is named as its kvcore.replay.ReplayConfig field.
    from sim.replay_cli import replay_command

    knobs = {k: v for k, v in ctx.params.items() if k not in ("trace", "out")}
    raise typer.Exit(replay_command(trace, out, knobs))


@app.command(
    cls=KvsimCommand,
    help="Compare kvcore with an installed vLLM on random traces, op sequences and sizing "
    "cases; a table of traces, steps and mismatches (exit 1 on any mismatch).",
)
def conformance(
    vllm_python: str = typer.Option(
        None,
        "--vllm-python",
        metavar="PATH",
        help="interpreter of an environment with vLLM installed",
        show_default=".venv-vllm/bin/python",
    ),
    traces: int = typer.Option(200, "--traces", help="random step traces to compare"),
    seed: int = typer.Option(DEFAULT_SEED, "--seed", help="seed of the random cases"),
    out_dir: str = typer.Option(
        "conformance-failures", "--out-dir", help="where mismatching cases are written"
    ),
    async_scheduling: bool = typer.Option(
        False,
        "--async-scheduling/--no-async-scheduling",
        help="replay the step traces through vLLM's AsyncScheduler and engine-core batch "
        "queue (and kvcore's); op sequences and sizing cases are the same either way",
    ),
    spec_decode: bool = typer.Option(
        False,
        "--spec-decode/--no-spec-decode",
        help="add speculative decoding (ngram, ngram_gpu, draft_model, eagle, eagle3; 1-4 "
        "drafts) to "
        "every step trace",
    ),
    pd: bool = typer.Option(
        False,
        "--pd/--no-pd",
        help="instead, P/D disaggregation: --traces cases on a prefill and on a decode "
        "instance with vLLM's NIXL connector (pull and push; --async-scheduling applies)",
    ),
) -> None:
    from sim.conformance.cli import run_conformance

    raise typer.Exit(
        run_conformance(
            vllm_python,
            traces,
            seed,
            out_dir,
            async_scheduling=async_scheduling,
            spec_decode=spec_decode,
            pd=pd,
        )
    )


@app.command(cls=KvsimCommand)
def budget(
    ctx: typer.Context,
    model: str = typer.Option(
        DEFAULT_MODEL,
        "--model",
        metavar="NAME|PATH",
        help="catalog model or config.json path; with --calibration: the file's model",
    ),
    gpu: str = typer.Option(
        DEFAULT_GPU,
        "--gpu",
        metavar="NAME|PATH",
        help="catalog GPU or GPU YAML path; with --calibration: the file's GPU",
    ),
    tensor_parallel_size: int = engine_option(
        "tensor_parallel_size", help_suffix="; with --calibration: the file's"
    ),
    data_parallel_size: int = engine_option("data_parallel_size"),
    gpu_memory_utilization: float = engine_option("gpu_memory_utilization"),
    max_model_len: int = engine_option("max_model_len"),
    max_num_batched_tokens: int = engine_option("max_num_batched_tokens"),
    max_num_seqs: int = engine_option("max_num_seqs"),
    block_size: int = engine_option("block_size"),
    kv_cache_dtype: str = engine_option("kv_cache_dtype"),
    num_gpu_blocks_override: int = engine_option("num_gpu_blocks_override"),
    speculative_config: str = engine_option(
        "speculative_config", help_suffix="; here: a draft model's weights and KV"
    ),
    calibration: str = typer.Option(
        None,
        "--calibration",
        metavar="FILE",
        help="calibration file from kvsim calibrate: its measured memory terms",
        show_default="none: catalog figures",
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """The KV block budget (num_gpu_blocks) per GPU and each term it was derived from."""
    from sim.budget_cli import budget_command

    named = given(ctx, {"model": model, "gpu": gpu})
    raise typer.Exit(
        budget_command(named["model"], named["gpu"], engine_flags(ctx), calibration, as_json)
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


@app.command(cls=KvsimCommand)
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
    workload: str = typer.Option(
        DEFAULT_WORKLOAD,
        "--workload",
        metavar="WORKLOAD",
        help="preset or workload YAML with a poisson, gamma or constant arrival",
    ),
    model: str = typer.Option(
        DEFAULT_MODEL, "--model", metavar="NAME|PATH", help="catalog model or config.json path"
    ),
    gpu: str = typer.Option(
        DEFAULT_GPU, "--gpu", metavar="NAME|PATH", help="catalog GPU or GPU YAML path"
    ),
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


@app.command(cls=KvsimCommand)
def sweep(
    spec: str = typer.Argument(
        ..., metavar="SWEEP.yaml", help="sweep spec: base run, axes, seeds (docs/sweep.md)"
    ),
    out: str = typer.Option(
        None, "--out", metavar="DIR", help="sweep directory", show_default="runs/sweeps/<name>"
    ),
    executor: str = typer.Option("local", "--executor", help="local (processes) or ray"),
    jobs: int = typer.Option(
        None, "--jobs", help="points run at once", show_default="CPUs (local), all (ray)"
    ),
    address: str = typer.Option(
        None, "--address", help="Ray cluster address", show_default="start a local Ray instance"
    ),
    scale: float = typer.Option(
        1.0, "--scale", help="multiply each workload's num_requests (or duration_s) by this"
    ),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Run a grid of simulations in parallel, resumably: run directories, sweep.csv, report.

    --out may name a new directory, an empty one, or an earlier kvsim sweep directory
    (resumed); anything else needs --force."""
    from sim.sweep.cli import sweep_command

    raise typer.Exit(sweep_command(spec, out, executor, jobs, address, scale, force=force))


app.command(name="recommend", cls=KvsimCommand)(_recommend)
app.command(name="autoscale", cls=KvsimCommand)(_autoscale)


@app.command(cls=KvsimCommand)
def report(
    directory: str = typer.Argument(..., metavar="DIR", help="a run or sweep directory"),
) -> None:
    """(Re)render plots and report.html of a run or sweep directory from its records."""
    from sim.sweep.cli import report_command

    raise typer.Exit(report_command(directory))


@app.command(
    cls=KvsimCommand,
    help="Profile memory (vLLM's profile_run) and step times on this machine; write a "
    "calibration file for `kvsim run/budget --calibration`. Needs torch (the calibrate extra).",
)
def calibrate(
    ctx: typer.Context,
    from_trace: str = typer.Option(
        None,
        "--from-trace",
        metavar="RUN",
        help="fit the roofline's efficiency factors of --gpu to a real vLLM run's request "
        "log (LLMServingSim requests.jsonl or its directory) instead of profiling; no torch",
        show_default="off: profile on --device",
        rich_help_panel=TRACE_FIT_PANEL,
    ),
    gpu: str = typer.Option(
        DEFAULT_GPU,
        "--gpu",
        metavar="NAME|PATH",
        help="with --from-trace: the GPU the run used (catalog name or GPU YAML)",
        rich_help_panel=TRACE_FIT_PANEL,
    ),
    engine: str = typer.Option(
        None,
        "--engine",
        metavar="FILE",
        help="with --from-trace: YAML of the run's engine arguments; flags given win",
        show_default="none: vLLM's defaults",
        rich_help_panel=TRACE_FIT_PANEL,
    ),
    max_num_seqs: int = engine_option("max_num_seqs"),
    max_num_batched_tokens: int = engine_option("max_num_batched_tokens"),
    max_model_len: int = engine_option("max_model_len"),
    gpu_memory_utilization: float = engine_option("gpu_memory_utilization"),
    num_gpu_blocks_override: int = engine_option("num_gpu_blocks_override"),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda"),
    model: str = typer.Option(
        None,
        "--model",
        metavar="NAME|PATH",
        help="catalog name or config.json (with --from-trace: the run's model)",
        show_default="kvsim-tiny on cpu, Llama-3.1-8B on cuda and with --from-trace",
    ),
    tp: int = typer.Option(
        1, "--tp", help="tensor-parallel size (one rank is profiled; with --from-trace: the run's)"
    ),
    quick: bool = typer.Option(False, "--quick", help="a smaller sweep (CPU: < 1 minute)"),
    out: str = typer.Option(
        None,
        "--out",
        metavar="FILE",
        help="calibration YAML to write (and a .csv of the measured steps beside it)",
        show_default="calibration-<model>-<device>.yaml; efficiency-<gpu>.yaml with --from-trace",
    ),
    num_layers: int = typer.Option(
        None, "--num-layers", help="profile only this many layers", show_default="all"
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="replace an existing --out file (or its .csv) that kvsim calibrate did not write",
    ),
) -> None:
    if from_trace is not None:
        from calibrate.trace_fit.cli import from_trace_command

        raise typer.Exit(
            from_trace_command(
                from_trace,
                model or DEFAULT_MODEL,
                gpu,
                tp,
                engine,
                engine_flags(ctx),
                out,
                force,
                __version__,
            )
        )
    from calibrate.cli import calibrate_command
    from sim.progress import progress_bar

    raise typer.Exit(
        calibrate_command(progress_bar, device, model, tp, quick, out, num_layers, force)
    )


@app.command(
    name="import-workload",
    cls=KvsimCommand,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def import_workload(
    ctx: typer.Context,
    source: str = typer.Argument(
        ...,
        metavar="vllm-bench|inference-perf",
        help="vllm-bench, then optionally --out FILE and --force, then -- and vllm bench "
        "serve's options; or inference-perf CONFIG.yaml, optionally --out FILE and --force",
    ),
) -> None:
    """Write a kvsim workload YAML rebuilt from a benchmark's settings (standard output
    unless --out; docs/workload.md lists what is kept and what is not modelled)."""
    from workloads.import_cli import main as import_main
    from workloads.import_cli import passed_through

    raise typer.Exit(import_main([source, *passed_through(source, ctx.args)]))


@app.command(name="list", cls=KvsimCommand)
def list_catalog() -> None:
    """Bundled workload presets, models and GPUs, one line each."""
    from sim.list_cli import list_command

    raise typer.Exit(list_command())


@app.command(cls=KvsimCommand)
def version() -> None:
    """Print kvsim's version, the vLLM version kvcore mirrors, and which build of the
    hot modules runs (compiled or pure Python)."""
    from kvsim_native import BUILD_LABELS, NATIVE_STATUS

    typer.echo(f"kvsim {__version__} (kvcore mirrors vLLM {VLLM_VERSION})")
    typer.echo(f"hot modules: {BUILD_LABELS[NATIVE_STATUS]}")


def main() -> None:
    """Console-script entry point."""
    install_signal_handlers()
    try:
        app(prog_name="kvsim")
    finally:
        # The process ends next: keep the interpreter's last collections from walking
        # every object a run left (tens of ms after a large run); memory goes back
        # with the process.
        gc.freeze()


if __name__ == "__main__":
    main()
