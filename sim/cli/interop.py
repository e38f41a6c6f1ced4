"""The commands that speak other tools' formats: ``kvsim export`` and ``kvsim compare``
(vllm bench serve, GuideLLM, LLMServingSim; :mod:`sim.interop.cli`) and ``kvsim
import-workload`` (vllm bench serve options, inference-perf configs;
:mod:`workloads.import_cli`). Each module is imported when its command runs.
"""

from __future__ import annotations

import typer


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
