"""Bodies of ``kvsim sweep`` and ``kvsim report``; each returns the exit status.

Bad input (spec, flags, directory): one message on stderr, exit 2. A point that fails
with an internal error: the other points still run, the error is printed, exit 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console

from sim.app.outdir import OutputError
from sim.app.progress import progress_bar
from sim.signals import exit_status, interrupted
from sim.sweep.runner import SweepResult, run_sweep
from sim.sweep.spec import SweepSpecError, load_sweep_spec


def _fail(message: str, status: int = 2) -> int:
    print(f"kvsim: error: {message}", file=sys.stderr)
    return status


def _default_out(spec_path: str) -> Path:
    try:
        name = load_sweep_spec(spec_path).name
    except SweepSpecError:
        name = None
    return Path("runs") / "sweeps" / (name or Path(spec_path).stem)


def sweep_command(
    spec_path: str,
    out: str | None,
    executor: str,
    jobs: int | None,
    address: str | None,
    scale: float,
    force: bool = False,
) -> int:
    """Run (or resume) a sweep with a progress bar on a terminal; print where it went."""
    out_dir = Path(out) if out else _default_out(spec_path)
    console = Console(stderr=True)
    kwargs = dict(executor=executor, jobs=jobs, address=address, scale=scale, force=force)
    try:
        if console.is_terminal:
            with progress_bar(console) as progress:
                task = progress.add_task("sweep", total=None, unit="points")

                def start(total: int, done: int) -> None:
                    progress.update(task, total=total, completed=done)

                result = run_sweep(
                    spec_path,
                    out_dir,
                    on_start=start,
                    on_point=lambda p, s: progress.advance(task),
                    **kwargs,
                )
        else:
            result = run_sweep(spec_path, out_dir, **kwargs)
    except (SweepSpecError, OutputError) as e:
        return _fail(str(e))
    except KeyboardInterrupt as e:
        print(
            f"kvsim: {interrupted(e)}; finished points are kept in {out_dir}, "
            "rerun the same command to resume",
            file=sys.stderr,
        )
        return exit_status(e)
    return _report_result(result)


def _report_result(result: SweepResult) -> int:
    ran = sum(result.statuses.values())
    parts = [f"{n} {s}" for s, n in sorted(result.statuses.items())]
    print(
        f"kvsim sweep: {result.num_points} points, {result.skipped} already done, {ran} run"
        + (f" ({', '.join(parts)})" if parts else "")
        + f" -> {result.out / 'sweep.csv'}, {result.out / 'report.html'}"
    )
    _print_results(result.out)
    for index, err in sorted(result.errors.items()):
        first = (str(err).strip().splitlines() or [type(err).__name__])[-1]
        print(f"kvsim: error: point {index}: {first}", file=sys.stderr)
    return 1 if result.errors else 0


def _print_results(out: Path) -> None:
    """The results table (one row per point) and the headline (where each line stops
    being steady, the best point), as in the sweep report; nothing when sweep.csv
    cannot be read."""
    from reports.sweep_data import load_sweep_frame
    from reports.sweep_table import headline_lines, terminal_table

    try:
        frame = load_sweep_frame(out)
        table = terminal_table(frame)
        lines = headline_lines(frame)
    except (OSError, ValueError, KeyError):
        return
    console = Console(width=None if sys.stdout.isatty() else 200)  # files: no wrapping
    console.print(table)
    for line in lines:
        console.print(f"kvsim sweep: {line}", markup=False, highlight=False)


def report_command(directory: str) -> int:
    """Re-render plots and report.html of a run, sweep or plan directory from its records."""
    path = Path(directory)
    try:
        if (path / "sweep.csv").is_file():
            from reports.sweep_html import render_sweep_report

            page = render_sweep_report(path)
        elif (path / "plan.json").is_file():
            from reports.plan_report import render_plan_report

            page = render_plan_report(path)
        elif (path / "summary.json").is_file():
            page = _render_run(path)
        else:
            return _fail(
                f"{directory}: not a run, sweep or plan directory (no summary.json, sweep.csv or "
                "plan.json)"
            )
    except (OSError, ValueError, KeyError) as e:
        return _fail(f"{directory}: cannot render the report: {e}")
    print(f"kvsim report: {page}")
    return 0


def _render_run(path: Path) -> Path:
    """Re-render a run directory's plots and report.html; a truncated or damaged
    ``steps.csv`` / ``requests.csv`` is one ``kvsim: warning:`` line per problem on
    stderr and in the report (ValueError when a file cannot be read at all)."""
    from reports.run_report import render_run

    rendered = render_run(path)
    for note in rendered.notes:
        print(f"kvsim: warning: {path}/{note}", file=sys.stderr)
    return rendered.page
