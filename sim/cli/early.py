"""What ``kvsim run`` starts before it loads its modules: the process that will render
its report (:func:`reports.render_worker.start_early`). That process's own imports
(matplotlib, pandas: about half a second of CPU) then overlap the run's start-up, on
the other CPU, instead of the simulation's first second, where they took CPU from the
helper processes (whole-process wall 0.953 of starting it with the run, on a
20,000-request trace, 2 CPUs, median of 10 pairs; measured once, not a benchmark).
"""

from __future__ import annotations

from reports.render_worker import start_early
from sim import offload


def start_report_worker(args: list[str]) -> None:
    """``kvsim run ARGS``: start the report's worker now, unless the run renders no
    report (``--no-report``), only shows its help, or may not use helper processes
    (:func:`sim.offload.allowed`); the run takes it, or it is killed at exit."""
    if "--no-report" in args or "--help" in args or not offload.allowed():
        return
    start_early()
