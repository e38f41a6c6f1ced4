"""The ``kvsim`` command line (typer): the app, its commands in ``--help``'s order, and
the console-script entry point :func:`main` (also ``python -m sim.cli``).

Each command's options live in one module of this package, beside the commands close
to it; the work is in the module each imports when it runs:

========================================  ===========================================
command                                   options in
========================================  ===========================================
run                                       :mod:`sim.cli.run`
export, compare, import-workload          :mod:`sim.cli.interop`
replay, conformance                       :mod:`sim.cli.replay`
budget                                    :mod:`sim.cli.budget`
plan                                      :mod:`sim.cli.plan`
sweep, report                             :mod:`sim.cli.sweep`
recommend                                 :mod:`sim.recommend.command`
autoscale                                 :mod:`sim.autoscale.command`
calibrate                                 :mod:`sim.cli.calibrate`
list, version                             :mod:`sim.cli.info`
========================================  ===========================================

Exit status: 0 on success, 2 on bad input (one message on stderr, no traceback),
1 on an internal error. Every option shows its help and default in ``--help``; engine
flags come from :mod:`sim.cli.options`.
"""

from __future__ import annotations

import gc
import os
import sys

# One BLAS thread unless the user says otherwise: set before numpy loads, whose OpenBLAS
# starts its thread pool then. kvsim's arrays are small, and on a 2-CPU machine the
# pool's idle threads took CPU time from the run's helper processes (a 20,000-request
# trace run: CPU 0.963, wall 0.984 of the run with the pool).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

if sys.argv[1:2] == ["run"]:
    # No cyclic collections while a run starts up: what its imports and configuration
    # build lives until exit, and collecting it again and again cost about 25 ms. The
    # simulation turns collections back on, over what it builds only (sim.app.simulate).
    gc.disable()
    # Its report's process, before the imports below.
    from sim.cli.early import start_report_worker

    start_report_worker(sys.argv[2:])

import typer  # noqa: E402

from kvcore import VLLM_VERSION  # noqa: E402
from sim.autoscale.command import autoscale as _autoscale  # noqa: E402
from sim.cli import budget, calibrate, info, interop, plan, replay, run, sweep  # noqa: E402
from sim.cli.options import KvsimCommand, KvsimGroup  # noqa: E402
from sim.cli.plan import PLAN_PATHS  # noqa: E402
from sim.recommend.command import recommend as _recommend  # noqa: E402
from sim.signals import install as install_signal_handlers  # noqa: E402

__all__ = ["PLAN_PATHS", "app", "main"]

app = typer.Typer(
    name="kvsim",
    cls=KvsimGroup,
    no_args_is_help=True,
    add_completion=False,
    help="Capacity planning for vLLM-style LLM serving, on vLLM V1's own KV-cache and "
    f"scheduling logic (mirrors vLLM {VLLM_VERSION}). Documentation: docs/README.md in "
    "the repository.",
)


@app.callback()
def _root() -> None:
    """kvsim: simulate vLLM replicas block for block."""


app.command(cls=KvsimCommand)(run.run)
app.command(cls=KvsimCommand)(interop.export)
app.command(cls=KvsimCommand)(interop.compare)
app.command()(replay.replay)
app.command(cls=KvsimCommand, help=replay.CONFORMANCE_HELP)(replay.conformance)
app.command(cls=KvsimCommand)(budget.budget)
app.command(cls=KvsimCommand)(plan.plan)
app.command(cls=KvsimCommand)(sweep.sweep)
app.command(name="recommend", cls=KvsimCommand)(_recommend)
app.command(name="autoscale", cls=KvsimCommand)(_autoscale)
app.command(cls=KvsimCommand)(sweep.report)
app.command(cls=KvsimCommand, help=calibrate.CALIBRATE_HELP)(calibrate.calibrate)
app.command(
    name="import-workload",
    cls=KvsimCommand,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)(interop.import_workload)
app.command(name="list", cls=KvsimCommand)(info.list_catalog)
app.command(cls=KvsimCommand)(info.version)


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
