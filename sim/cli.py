"""The ``kvsim`` command line (typer).

Exit status: 0 on success, 2 on bad input (one message on stderr, no traceback),
1 on an internal error.
"""

from __future__ import annotations

import gc

import typer

from kvcore import VLLM_VERSION, __version__
from sim.conformance import DEFAULT_SEED
from sim.outdir import FORCE_HELP
from sim.signals import install as install_signal_handlers

app = typer.Typer(
    name="kvsim",
    no_args_is_help=True,
    add_completion=False,
    help="Capacity planning for vLLM-style LLM serving, on vLLM V1's own KV-cache and "
    f"scheduling logic (mirrors vLLM {VLLM_VERSION}).",
)


@app.callback()
def _root() -> None:
    """kvsim: simulate vLLM replicas block for block."""


@app.command()
def run(
    workload: str = typer.Argument(
        None, help="preset name, workload YAML, or trace (.jsonl/.csv) [default: chat]"
    ),
    engine: str = typer.Option(None, "--engine", help="YAML file of engine arguments"),
    model: str = typer.Option(
        None, "--model", help="catalog model or config.json path [default: Llama-3.1-8B]"
    ),
    gpu: str = typer.Option(None, "--gpu", help="catalog GPU or GPU YAML [default: H100-SXM]"),
    calibration: str = typer.Option(None, "--calibration", help="calibration file"),
    seed: int = typer.Option(None, "--seed", help="overrides the workload's seed"),
    out: str = typer.Option(
        None, "--out", help="run directory [default: runs/<workload>_<model>_<gpu>]"
    ),
    decisions: bool = typer.Option(False, "--decisions", help="write decisions.jsonl"),
    check: bool = typer.Option(False, "--check", help="check kvcore invariants every step"),
    fast_forward: bool = typer.Option(
        True,
        "--fast-forward/--no-fast-forward",
        help="advance decode-only stretches at once (identical results)",
    ),
    block_size: int = typer.Option(None, "--block-size"),
    gpu_memory_utilization: float = typer.Option(None, "--gpu-memory-utilization"),
    num_gpu_blocks_override: int = typer.Option(None, "--num-gpu-blocks-override"),
    max_num_seqs: int = typer.Option(None, "--max-num-seqs"),
    max_num_batched_tokens: int = typer.Option(None, "--max-num-batched-tokens"),
    max_model_len: int = typer.Option(None, "--max-model-len"),
    tensor_parallel_size: int = typer.Option(None, "--tensor-parallel-size"),
    long_prefill_token_threshold: int = typer.Option(None, "--long-prefill-token-threshold"),
    enable_chunked_prefill: bool = typer.Option(
        None, "--enable-chunked-prefill/--no-enable-chunked-prefill"
    ),
    enable_prefix_caching: bool = typer.Option(
        None, "--enable-prefix-caching/--no-enable-prefix-caching"
    ),
    scheduling_policy: str = typer.Option(None, "--scheduling-policy", help="fcfs or priority"),
    kv_cache_dtype: str = typer.Option(None, "--kv-cache-dtype", help="auto or fp8"),
    latency_model: str = typer.Option(None, "--latency-model", help="roofline or constant"),
    constant_step_s: float = typer.Option(
        None, "--constant-step-s", help="seconds per step for --latency-model constant"
    ),
    num_replicas: int = typer.Option(None, "--num-replicas", help="replicas [default: 1]"),
    router: str = typer.Option(
        None,
        "--router",
        help="round_robin, least_outstanding, least_kv or prefix_aware [default: round_robin]",
    ),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Simulate vLLM replicas serving a workload; write summary, records, plots, report.

    --out may name a new directory, an empty one, or an earlier kvsim run directory
    (replaced whole, atomically); anything else needs --force."""
    from sim.run_cli import run_command

    overrides = dict(
        block_size=block_size,
        gpu_memory_utilization=gpu_memory_utilization,
        num_gpu_blocks_override=num_gpu_blocks_override,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        tensor_parallel_size=tensor_parallel_size,
        long_prefill_token_threshold=long_prefill_token_threshold,
        enable_chunked_prefill=enable_chunked_prefill,
        enable_prefix_caching=enable_prefix_caching,
        scheduling_policy=scheduling_policy,
        kv_cache_dtype=kv_cache_dtype,
        latency_model=latency_model,
        constant_step_s=constant_step_s,
    )
    raise typer.Exit(
        run_command(
            workload,
            engine,
            model,
            gpu,
            calibration,
            seed,
            out,
            decisions,
            check,
            overrides,
            num_replicas=num_replicas,
            router=router,
            fast_forward=fast_forward,
            force=force,
        )
    )


@app.command()
def replay(
    trace: str = typer.Argument(
        ...,
        help="replay trace: JSON list of {request_id, arrival_step, prompt_token_ids, "
        "max_tokens[, priority, cache_salt, lora_id]}",
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
    reserve_full_isl: bool = typer.Option(
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
        None, "--sliding-window", help="tokens of a sliding_window group's window"
    ),
    attention_chunk_size: int = typer.Option(
        None, "--attention-chunk-size", help="tokens per chunk of a chunked_local group"
    ),
    prefix_caching_hash_algo: str = typer.Option(
        "sha256",
        "--prefix-caching-hash-algo",
        help="sha256, sha256_cbor, xxhash or xxhash_cbor",
    ),
    max_model_len: int = typer.Option(
        None,
        "--max-model-len",
        help="longest sequence, tokens; unset: the trace's largest prompt + max_tokens",
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
    kv_events: bool = typer.Option(
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
    from sim.replay_cli import replay_command

    knobs = dict(
        block_size=block_size,
        num_gpu_blocks=num_gpu_blocks,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        enable_chunked_prefill=enable_chunked_prefill,
        enable_prefix_caching=enable_prefix_caching,
        long_prefill_token_threshold=long_prefill_token_threshold,
        policy=policy,
        watermark=watermark,
        scheduler_reserve_full_isl=reserve_full_isl,
        kv_groups=kv_groups,
        sliding_window=sliding_window,
        attention_chunk_size=attention_chunk_size,
        prefix_caching_hash_algo=prefix_caching_hash_algo,
        max_model_len=max_model_len,
        sample_token_id=sample_token_id,
        none_hash_seed=none_hash_seed,
        num_lookahead_tokens=num_lookahead_tokens,
        enable_kv_cache_events=kv_events,
        dump_block_tables=dump_block_tables,
        async_scheduling=async_scheduling,
    )
    raise typer.Exit(replay_command(trace, out, knobs))


@app.command()
def conformance(
    vllm_python: str = typer.Option(
        None,
        "--vllm-python",
        help="interpreter of an environment with vLLM installed [default: .venv-vllm/bin/python]",
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
) -> None:
    """Compare kvcore with an installed vLLM on random traces, op sequences and sizing
    cases; a table of traces, steps and mismatches (exit 1 on any mismatch)."""
    from sim.conformance.cli import run_conformance

    raise typer.Exit(
        run_conformance(vllm_python, traces, seed, out_dir, async_scheduling=async_scheduling)
    )


@app.command()
def budget(
    model: str = typer.Option(..., "--model", help="catalog name or config.json path"),
    gpu: str = typer.Option(..., "--gpu", help="catalog name or GPU YAML path"),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size"),
    gpu_memory_utilization: float = typer.Option(
        None, "--gpu-memory-utilization", help="[default: 0.92, vLLM 0.33]"
    ),
    max_model_len: int = typer.Option(None, "--max-model-len", help="[default: model max]"),
    max_num_batched_tokens: int = typer.Option(
        None, "--max-num-batched-tokens", help="[default: vLLM's for the GPU]"
    ),
    max_num_seqs: int = typer.Option(None, "--max-num-seqs", help="[default: vLLM's]"),
    block_size: int = typer.Option(16, "--block-size"),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="auto or fp8"),
    num_gpu_blocks_override: int = typer.Option(None, "--num-gpu-blocks-override"),
    calibration: str = typer.Option(
        None, "--calibration", help="calibration file from kvsim calibrate"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """The KV block budget (num_gpu_blocks) per GPU and each term it was derived from."""
    from sim.budget_cli import budget_command

    raise typer.Exit(
        budget_command(
            model,
            gpu,
            tensor_parallel_size,
            gpu_memory_utilization,
            max_model_len,
            max_num_batched_tokens,
            max_num_seqs,
            block_size,
            kv_cache_dtype,
            num_gpu_blocks_override,
            calibration,
            as_json,
        )
    )


@app.command()
def plan(
    plan_file: str = typer.Argument(None, help="plan YAML (see `sim/plan/spec.py`)"),
    out: str = typer.Option(None, "--out", help="plan directory [default: plans/<...>]"),
    question: str = typer.Option(None, "--question", help="max_rate, min_replicas or min_kv"),
    workload: str = typer.Option(None, "--workload", help="preset or workload YAML"),
    model: str = typer.Option(None, "--model"),
    gpu: str = typer.Option(None, "--gpu"),
    ttft_mean_s: float = typer.Option(None, "--ttft-mean-s", help="SLO: mean TTFT, seconds"),
    ttft_p90_s: float = typer.Option(None, "--ttft-p90-s", help="SLO: p90 TTFT, seconds"),
    tpot_mean_s: float = typer.Option(None, "--tpot-mean-s", help="SLO: mean TPOT, seconds"),
    tpot_p99_s: float = typer.Option(None, "--tpot-p99-s"),
    e2e_p99_s: float = typer.Option(None, "--e2e-p99-s"),
    max_preemptions_per_request: float = typer.Option(None, "--max-preemptions-per-request"),
    rate: float = typer.Option(None, "--rate", help="target rate (min_replicas, min_kv)"),
    num_replicas: int = typer.Option(None, "--num-replicas"),
    router: str = typer.Option(None, "--router"),
    knob: str = typer.Option(
        None, "--knob", help="min_kv: num_gpu_blocks, gpu_memory_utilization or max_num_seqs"
    ),
    low: float = typer.Option(None, "--low", help="search range low end"),
    high: float = typer.Option(None, "--high", help="search range high end"),
    max_probes: int = typer.Option(None, "--max-probes"),
    num_seeds: int = typer.Option(None, "--seeds", help="seeds 0..N-1 per probe"),
    num_requests: int = typer.Option(
        None,
        "--num-requests",
        help="requests per probe run to start with (runs double until they decide)",
    ),
    precision: float = typer.Option(
        None,
        "--precision",
        help="relative half-width of an SLO metric's 95% interval that decides a run "
        "whose interval holds the bound [default: 0.05]",
    ),
    max_length_factor: int = typer.Option(
        None, "--max-length-factor", help="longest probe run, times the start [default: 16]"
    ),
    fixed_length: bool = typer.Option(
        None,
        "--fixed-length/--no-fixed-length",
        help="run every probe at --num-requests only (a note where that is too short)",
    ),
    max_num_seqs: int = typer.Option(None, "--max-num-seqs"),
    num_gpu_blocks_override: int = typer.Option(None, "--num-gpu-blocks-override"),
    max_model_len: int = typer.Option(
        None, "--max-model-len", help="tokens [default: the model's maximum]"
    ),
    max_num_batched_tokens: int = typer.Option(None, "--max-num-batched-tokens"),
    gpu_memory_utilization: float = typer.Option(None, "--gpu-memory-utilization"),
    block_size: int = typer.Option(None, "--block-size", help="tokens per KV block"),
    tensor_parallel_size: int = typer.Option(None, "--tensor-parallel-size"),
    enable_prefix_caching: bool = typer.Option(
        None, "--enable-prefix-caching/--no-enable-prefix-caching"
    ),
    enable_chunked_prefill: bool = typer.Option(
        None, "--enable-chunked-prefill/--no-enable-chunked-prefill"
    ),
    scheduling_policy: str = typer.Option(None, "--scheduling-policy", help="fcfs or priority"),
    long_prefill_token_threshold: int = typer.Option(None, "--long-prefill-token-threshold"),
    kv_cache_dtype: str = typer.Option(None, "--kv-cache-dtype", help="auto or fp8"),
    latency_model: str = typer.Option(None, "--latency-model", help="roofline or constant"),
    constant_step_s: float = typer.Option(
        None, "--constant-step-s", help="seconds per step for --latency-model constant"
    ),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Capacity search: highest rate, fewest replicas or smallest KV budget meeting SLOs.

    --out may name a new directory, an empty one, or an earlier kvsim plan directory
    (probed again); anything else needs --force."""
    from sim.plan.cli import plan_command

    overrides = {
        "question": question,
        "workload": workload,
        "model": model,
        "gpu": gpu,
        "slo.ttft_mean_s": ttft_mean_s,
        "slo.ttft_p90_s": ttft_p90_s,
        "slo.tpot_mean_s": tpot_mean_s,
        "slo.tpot_p99_s": tpot_p99_s,
        "slo.e2e_p99_s": e2e_p99_s,
        "slo.max_preemptions_per_request": max_preemptions_per_request,
        "rate": rate,
        "num_replicas": num_replicas,
        "router": router,
        "knob": knob,
        "search.low": low,
        "search.high": high,
        "search.max_probes": max_probes,
        "seeds": list(range(num_seeds)) if num_seeds is not None and num_seeds > 0 else num_seeds,
        "num_requests": num_requests,
        "length.precision": precision,
        "length.max_factor": max_length_factor,
        "length.fixed": fixed_length,
        "engine.max_num_seqs": max_num_seqs,
        "engine.num_gpu_blocks_override": num_gpu_blocks_override,
        "engine.max_model_len": max_model_len,
        "engine.max_num_batched_tokens": max_num_batched_tokens,
        "engine.gpu_memory_utilization": gpu_memory_utilization,
        "engine.block_size": block_size,
        "engine.tensor_parallel_size": tensor_parallel_size,
        "engine.enable_prefix_caching": enable_prefix_caching,
        "engine.enable_chunked_prefill": enable_chunked_prefill,
        "engine.scheduling_policy": scheduling_policy,
        "engine.long_prefill_token_threshold": long_prefill_token_threshold,
        "engine.kv_cache_dtype": kv_cache_dtype,
        "engine.latency_model": latency_model,
        "engine.constant_step_s": constant_step_s,
    }
    raise typer.Exit(plan_command(plan_file, out, overrides, force=force))


@app.command()
def sweep(
    spec: str = typer.Argument(..., help="sweep spec (YAML): base run, axes, seeds"),
    out: str = typer.Option(None, "--out", help="sweep directory [default: runs/sweeps/<name>]"),
    executor: str = typer.Option("local", "--executor", help="local (processes) or ray"),
    jobs: int = typer.Option(
        None, "--jobs", help="points run at once [default: CPUs (local), all (ray)]"
    ),
    address: str = typer.Option(
        None, "--address", help="Ray cluster address [default: start a local Ray instance]"
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


@app.command()
def report(directory: str = typer.Argument(..., help="a run or sweep directory")) -> None:
    """(Re)render plots and report.html of a run or sweep directory from its records."""
    from sim.sweep.cli import report_command

    raise typer.Exit(report_command(directory))


@app.command()
def calibrate(
    device: str = typer.Option("cpu", "--device", help="cpu or cuda"),
    model: str = typer.Option(
        None, "--model", help="catalog name or config.json [default: kvsim-tiny on cpu]"
    ),
    tp: int = typer.Option(1, "--tp", help="tensor-parallel size (one rank is profiled)"),
    quick: bool = typer.Option(False, "--quick", help="a smaller sweep (CPU: < 1 minute)"),
    out: str = typer.Option(None, "--out", help="calibration YAML [default: calibration-*.yaml]"),
    num_layers: int = typer.Option(None, "--num-layers", help="profile only this many layers"),
    force: bool = typer.Option(
        False,
        "--force",
        help="replace an existing --out file (or its .csv) that kvsim calibrate did not write",
    ),
) -> None:
    """Profile memory (vLLM's profile_run) and step times on this machine; write a
    calibration file for `kvsim run/budget --calibration`. Needs torch."""
    from calibrate.cli import calibrate_command
    from sim.progress import progress_bar

    raise typer.Exit(
        calibrate_command(progress_bar, device, model, tp, quick, out, num_layers, force)
    )


@app.command(name="list")
def list_catalog() -> None:
    """Bundled workload presets, models and GPUs."""
    from sim.budget_cli import list_command

    raise typer.Exit(list_command())


@app.command()
def version() -> None:
    """Print kvsim's version and the vLLM version kvcore mirrors."""
    typer.echo(f"kvsim {__version__} (kvcore mirrors vLLM {VLLM_VERSION})")


def main() -> None:
    """Console-script entry point."""
    install_signal_handlers()
    try:
        app()
    finally:
        # The process ends next: keep the interpreter's last collections from walking
        # every object a run left (tens of ms after a large run); memory goes back
        # with the process.
        gc.freeze()


if __name__ == "__main__":
    main()
