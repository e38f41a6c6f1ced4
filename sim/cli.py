"""The ``kvsim`` command line (typer).

Exit status: 0 on success, 2 on bad input (one message on stderr, no traceback),
1 on an internal error.
"""

from __future__ import annotations

import typer

from kvcore import VLLM_VERSION, __version__
from sim.conformance import DEFAULT_SEED

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
) -> None:
    """Simulate one vLLM replica serving a workload; write summary, records, plots, report."""
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
            workload, engine, model, gpu, calibration, seed, out, decisions, check, overrides
        )
    )


@app.command(
    context_settings={
        "allow_extra_args": True,
        "ignore_unknown_options": True,
        "help_option_names": [],
    },
    add_help_option=False,
    help="Replay a step-indexed trace through kvcore's V1 scheduler with a fake model; "
    "one JSON line per step. Run `kvsim replay --help` for the knobs.",
)
def replay(ctx: typer.Context) -> None:
    from kvcore.replay_cli import main as replay_main

    raise typer.Exit(replay_main(list(ctx.args), prog="kvsim replay"))


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
) -> None:
    """Compare kvcore with an installed vLLM on random traces, op sequences and sizing
    cases; a table of traces, steps and mismatches (exit 1 on any mismatch)."""
    from sim.conformance.cli import run_conformance

    raise typer.Exit(run_conformance(vllm_python, traces, seed, out_dir))


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
    calibration: str = typer.Option(None, "--calibration", help="(not supported yet)"),
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
    app()


if __name__ == "__main__":
    main()
