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
from typing import Any

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

import functools  # noqa: E402
import importlib  # noqa: E402

import typer  # noqa: E402

from kvcore import VLLM_VERSION  # noqa: E402
from sim.cli.options import KvsimCommand, KvsimGroup  # noqa: E402
from sim.signals import install as install_signal_handlers  # noqa: E402

__all__ = ["PLAN_PATHS", "app", "main"]

_HELP = (
    "Capacity planning for vLLM-style LLM serving, on vLLM V1's own KV-cache and "
    f"scheduling logic (mirrors vLLM {VLLM_VERSION}). Documentation: docs/README.md in "
    "the repository."
)


def _root() -> None:
    """kvsim: simulate vLLM replicas block for block."""


_COMMANDS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "run": ("sim.cli.run", "run", {"cls": KvsimCommand}),
    "export": ("sim.cli.interop", "export", {"cls": KvsimCommand}),
    "compare": ("sim.cli.interop", "compare", {"cls": KvsimCommand}),
    "replay": ("sim.cli.replay", "replay", {}),
    "conformance": ("sim.cli.replay", "conformance", {"cls": KvsimCommand}),
    "budget": ("sim.cli.budget", "budget", {"cls": KvsimCommand}),
    "plan": ("sim.cli.plan", "plan", {"cls": KvsimCommand}),
    "sweep": ("sim.cli.sweep", "sweep", {"cls": KvsimCommand}),
    "recommend": ("sim.recommend.command", "recommend", {"cls": KvsimCommand}),
    "autoscale": ("sim.autoscale.command", "autoscale", {"cls": KvsimCommand}),
    "report": ("sim.cli.sweep", "report", {"cls": KvsimCommand}),
    "calibrate": ("sim.cli.calibrate", "calibrate", {"cls": KvsimCommand}),
    "import-workload": (
        "sim.cli.interop",
        "import_workload",
        {
            "cls": KvsimCommand,
            "context_settings": {"allow_extra_args": True, "ignore_unknown_options": True},
        },
    ),
    "list": ("sim.cli.info", "list_catalog", {"cls": KvsimCommand}),
    "version": ("sim.cli.info", "version", {"cls": KvsimCommand}),
}
"""The commands, in ``--help``'s order: each one's module, function and ``app.command``
options. A module is imported when its command is added to an app."""
_HELP_TEXTS = {"conformance": "CONFORMANCE_HELP", "calibrate": "CALIBRATE_HELP"}
"""Commands whose help is a text of their module's, not the function's docstring."""


@functools.cache
def _make_app(only: str | None) -> typer.Typer:
    """The ``kvsim`` app with every command (:data:`app`), or with command ``only``
    alone; each made once."""
    made = typer.Typer(
        name="kvsim", cls=KvsimGroup, no_args_is_help=True, add_completion=False, help=_HELP
    )
    made.callback()(_root)
    for name, (module_name, function, options) in _COMMANDS.items():
        if only is not None and name != only:
            continue
        module = importlib.import_module(module_name)
        extra: dict[str, Any] = {"name": name}
        if name in _HELP_TEXTS:
            extra["help"] = getattr(module, _HELP_TEXTS[name])
        made.command(**options, **extra)(getattr(module, function))
    return made


def _app_for(args: list[str]) -> typer.Typer:
    """The app that runs ``kvsim ARGS``: for a command's own arguments, one that holds
    that command alone (it parses, helps and fails as in :data:`app`), whose module
    alone is imported. Typer builds the parser of every command it holds on each start:
    12 ms for all of them against 2 ms for ``run`` alone (median of three builds, in
    process); with the other commands' modules no longer imported, ``kvsim run``'s
    imports and app took 210 against 224 ms (medians of 8 runs, in process)."""
    return _make_app(args[0] if args and args[0] in _COMMANDS else None)


def __getattr__(name: str) -> Any:
    """``app`` (every command) and ``PLAN_PATHS``, made or imported when first used."""
    if name == "app":
        return _make_app(None)
    if name == "PLAN_PATHS":
        from sim.cli.plan import PLAN_PATHS

        return PLAN_PATHS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console-script entry point."""
    install_signal_handlers()
    try:
        _app_for(sys.argv[1:])(prog_name="kvsim")
    finally:
        # The process ends next: keep the interpreter's last collections from walking
        # every object a run left (tens of ms after a large run); memory goes back
        # with the process.
        gc.freeze()
