"""``kvsim sweep`` and ``kvsim report`` (which re-renders a run's, sweep's or plan's
report): their options (typer); the work is in :mod:`sim.sweep.cli`, imported when a
command runs."""

from __future__ import annotations

import typer

from sim.app.outdir import FORCE_HELP


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


def report(
    directory: str = typer.Argument(..., metavar="DIR", help="a run or sweep directory"),
) -> None:
    """(Re)render plots and report.html of a run or sweep directory from its records."""
    from sim.sweep.cli import report_command

    raise typer.Exit(report_command(directory))
