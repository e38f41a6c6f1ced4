"""``kvsim calibrate``: its options (typer); the work is in :mod:`calibrate.harness.cli`
(profiling, needs torch) or :mod:`calibrate.trace_fit.cli` (``--from-trace``), imported
when the command runs.

:func:`calibrate` is long because typer declares each option as a parameter with its
help and default; its body picks one of the two commands.
"""

from __future__ import annotations

import typer

from kvcore import __version__
from sim.cli.options import TRACE_FIT_PANEL, engine_flags, engine_option, gpu_option, model_option
from sim.defaults import DEFAULT_MODEL

CALIBRATE_HELP = (
    "Profile memory (vLLM's profile_run) and step times on this machine; write a "
    "calibration file for `kvsim run/budget --calibration`. Needs torch (the calibrate extra)."
)
"""``kvsim calibrate``'s help (the command's function has no docstring)."""


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
    gpu: str = gpu_option(
        "with --from-trace: the GPU the run used (catalog name or GPU YAML)",
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
    model: str = model_option(
        "catalog name or config.json (with --from-trace: the run's model)",
        None,
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
    from calibrate.harness.cli import calibrate_command
    from sim.app.progress import progress_bar

    raise typer.Exit(
        calibrate_command(progress_bar, device, model, tp, quick, out, num_layers, force)
    )
