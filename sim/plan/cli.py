"""Body of ``kvsim plan``: load the plan (file then flags), run it, print the answer.

Exit status: 0 with an answer (also when every probe passed up to the search limit,
which is said); 2 on bad input and when no probed value meets the SLOs (an
impossible SLO: the message names the failing SLO at the easiest probe, and
``plan.json`` with the probes is still written); 1 on internal errors.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from sim.app.outdir import OutputError
from sim.app.progress import progress_bar
from sim.plan.describe import describe
from sim.plan.runner import run_plan
from sim.plan.spec import PlanError, load_plan
from sim.signals import exit_status, interrupted


def _infeasible_message(doc: dict[str, Any], out: Path) -> str:
    probes = doc["probes"]
    easiest = probes[0] if doc["want"] == "max" else probes[-1]
    seed = next(s for s in easiest["seeds"] if not s["passed"])
    why = "; ".join(seed["failures"])
    where = Path(easiest["dir"]).name  # rate=0.5, prefill=2,decode=6, ...
    return (
        f"no {doc['param']} searched meets the SLOs: at {where} (the easiest probe) "
        f"seed {seed['seed']} fails: {why}; probes in {out / 'plan.json'}"
    )


def _run_with_progress(plan: Any, out_dir: Path, source: str, force: bool) -> dict[str, Any]:
    """``run_plan`` with a progress bar on a terminal: one line per probe run (requests
    finished, rate, time left) and the probes so far."""
    console = Console(stderr=True)
    if not console.is_terminal:
        return run_plan(plan, out_dir, source, force=force)
    with progress_bar(console) as progress:
        most = plan.search.max_probes
        probes = progress.add_task(f"probes (at most {most})", total=None, unit="probes")
        runs = progress.add_task("starting", total=None, unit="req")

        def on_run(probe: int, label: str, total: int | None) -> Callable[[int], None]:
            progress.update(probes, completed=probe - 1)
            progress.reset(runs, total=total, description=label)
            return lambda n: progress.advance(runs, n)

        return run_plan(plan, out_dir, source, force=force, on_run=on_run)


def plan_command(
    path: str | None, out: str | None, overrides: dict[str, Any], force: bool = False
) -> int:
    """Run ``kvsim plan``; returns the exit status."""
    out_dir = Path(out) if out else None
    try:
        plan = load_plan(path, overrides)
        source = path or "plan flags"
        out_dir = (
            Path(out) if out else Path("plans") / f"{Path(plan.workload).stem}_{plan.question}"
        )
        doc = _run_with_progress(plan, out_dir, source, force)
    except (PlanError, OutputError) as e:
        print(f"kvsim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        where = f"; the probes run so far are kept in {out_dir / 'probes'}" if out_dir else ""
        print(f"kvsim: {interrupted(e)}; no plan.json written{where}", file=sys.stderr)
        return exit_status(e)
    if doc["status"] == "infeasible":
        _print_results(doc)
        print(f"kvsim: error: {_infeasible_message(doc, out_dir)}", file=sys.stderr)
        return 2
    _print_results(doc)
    print(describe(doc, probes=False))
    print(f"plan: {out_dir / 'plan.json'}, report: {out_dir / 'report.html'}")
    return 0


def _print_results(doc: dict[str, Any]) -> None:
    """The probe table (one row per probe seed, ms) and the answer in sentences, as in
    the plan report."""
    from rich.console import Console

    from reports.plan_table import headline_lines, terminal_table

    console = Console(width=None if sys.stdout.isatty() else 200)  # files: no wrapping
    console.print(terminal_table(doc))
    for line in headline_lines(doc):
        console.print(f"kvsim plan: {line}", markup=False, highlight=False)
