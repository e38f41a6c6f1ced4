"""``kvsim run``: one simulation from a workload, model, GPU and engine settings.

Prints a summary table and writes the run directory. Bad input: one message naming
the file/flag and field on stderr, exit 2. Internal errors exit 1.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from calibrate.use_calibration import calibration_defaults
from sim.app.engine_config import load_engine_config
from sim.app.outdir import OutputError, OutputTarget, check_output
from sim.app.pd_config import parse_pd
from sim.app.run import (
    DEFAULT_GPU,
    DEFAULT_MODEL,
    DEFAULT_WORKLOAD,
    NothingServed,
    RunSpec,
    run,
)
from sim.app.run_table import summary_table
from sim.app.setup import ResolvedRun, resolve_run
from sim.errors import SimulationStuck
from sim.records.goodput import parse_goodput
from sim.records.step_parquet import check_format as check_steps_format
from sim.records.step_thin import check_mode as check_steps_mode
from sim.signals import exit_status, interrupted
from workloads.overrides import WorkloadOverrides


def _fail(message: str) -> int:
    print(f"kvsim: error: {message}", file=sys.stderr)
    return 2


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
    try:
        goodput_slo = _check_output_flags(export, goodput, steps, steps_format)
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
    out_dir = Path(out) if out else _default_out(resolved)
    try:
        target = check_output(out_dir, "run", force=force)
    except OutputError as e:
        return _fail(str(e))
    try:
        summary = _run_with_progress(spec, out_dir, resolved, target, report)
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
    Console().print(summary_table(summary, out_dir))
    return _export(target, export) if export else 0


def _check_output_flags(
    export: list[str] | None, goodput: list[str] | None, steps: str, steps_format: str
) -> dict[str, float] | None:
    """Check ``--export``'s formats, ``--steps`` and ``--steps-format``; return
    ``--goodput``'s SLOs (ms by key; None without). ValueError naming the flag."""
    from sim.interop.formats import check_format

    for fmt in export or []:
        check_format(fmt, "--export")
    goodput_slo = parse_goodput(goodput)
    check_steps_mode(steps, "--steps")
    check_steps_format(steps_format, "--steps-format")
    return goodput_slo


def _default_out(resolved: ResolvedRun) -> Path:
    """The run directory without ``--out``: ``runs/WORKLOAD_MODEL_GPU``."""
    return Path("runs") / (
        f"{Path(resolved.workload_name).stem}_{resolved.model_name}_{resolved.gpu_name}"
    )


def _run_with_progress(
    spec: RunSpec, out_dir: Path, resolved: ResolvedRun, target: OutputTarget, report: bool
) -> dict[str, Any]:
    """:func:`sim.app.run.run` with a progress bar on stderr when it is a terminal;
    the run's summary."""
    console = Console(stderr=True)
    total = resolved.workload.num_requests
    if console.is_terminal:
        # Imported here: rich's progress module (~20 ms) only for a bar that is shown.
        from sim.app.progress import progress_bar

        with progress_bar(console) as progress:
            task = progress.add_task("simulating", total=total, unit="req")
            return run(
                spec,
                out_dir,
                resolved=resolved,
                on_progress=lambda n: progress.advance(task, n),
                target=target,
                render=report,
            )
    return run(spec, out_dir, resolved=resolved, target=target, render=report)


def _export(target: OutputTarget, export: list[str]) -> int:
    """Write the ``--export`` formats into the finished run directory; the exit status
    (2 with one message when an export fails)."""
    from sim.interop.cli import export_run

    try:
        for path in export_run(target.path, list(dict.fromkeys(export))):
            print(f"kvsim: wrote {path}", file=sys.stderr)
    except (ValueError, OSError) as e:
        return _fail(f"the run is complete, but its export failed: {e}")
    return 0
