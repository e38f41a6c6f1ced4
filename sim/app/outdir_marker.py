"""The marker of a kvsim directory (:data:`MARKER`): a hidden file saying that kvsim
wrote the directory, its kind (``run``, ``sweep``, ``plan``, ``recommend``,
``autoscale``), kvsim's version and the command; and the entries kvsim writes in a
directory of each kind (:data:`OWN_ENTRIES`). Directories written before the marker
existed are recognised by the files only kvsim writes there (:func:`_legacy_kind`).
The rules of what kvsim may write where are :mod:`sim.app.outdir`'s.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from kvcore import __version__

MARKER = ".kvsim-dir.json"
"""Hidden file in every directory kvsim writes: ``{"kind", "kvsim_version", "command"}``."""

KINDS = ("run", "sweep", "plan", "recommend", "autoscale")

OWN_ENTRIES: dict[str, frozenset[str]] = {
    "run": frozenset(
        {
            "config.yaml",
            "summary.json",
            "requests.csv",
            "aborted.csv",
            "spec_decode.csv",
            "steps.csv",
            "steps.parquet",
            "decisions.jsonl",
            "plots",
            "report.html",
            "error.json",
            "vllm-bench.json",
            "guidellm-benchmarks.json",
        }
    ),
    "sweep": frozenset({"sweep.yaml", "sweep.csv", "inputs", "points", "plots", "report.html"}),
    "plan": frozenset({"plan.json", "probes", "plots", "report.html"}),
    "recommend": frozenset(
        {
            "recommend.yaml",
            "recommend.json",
            "pareto.csv",
            "candidates",
            "verify",
            "plots",
            "report.html",
        }
    ),
    "autoscale": frozenset(
        {"autoscale.json", "replica-plan", "replica-plan-workloads", "autoscaled", "peak"}
    ),
}
"""Top-level entries kvsim writes in a directory of each kind (besides the marker)."""


def command_line() -> str:
    """The command that is running, as a shell would read it (``kvsim ...``; also for
    ``python -m sim.cli``, whose ``argv[0]`` is ``sim/cli/__main__.py``)."""
    argv = list(sys.argv)
    ends = ("kvsim", "cli.py", os.path.join("cli", "__main__.py"))
    if argv and (argv[0].endswith(ends) or argv[0] == "-m"):
        argv[0] = "kvsim"
    return shlex.join(argv)


def marker_text(kind: str) -> str:
    """The marker's content for a directory of ``kind``."""
    doc = {"kind": kind, "kvsim_version": __version__, "command": command_line()}
    return json.dumps(doc, indent=2) + "\n"


def write_marker(directory: Path, kind: str) -> None:
    """Mark ``directory`` as a kvsim directory of ``kind``. A run's marker is written
    last (:func:`sim.app.outdir.publish`), so a marked run directory is complete; a
    sweep or plan directory is marked when it starts (it fills up and resumes)."""
    (directory / MARKER).write_text(marker_text(kind), encoding="utf-8")


def read_kind(directory: Path) -> str | None:
    """The kind of kvsim directory ``directory`` is, or None when kvsim did not write it."""
    marker = directory / MARKER
    if marker.is_file():
        try:
            kind = json.loads(marker.read_text(encoding="utf-8")).get("kind")
        except (OSError, ValueError, AttributeError):
            return None
        return kind if kind in KINDS else None
    return _legacy_kind(directory)


def _legacy_kind(directory: Path) -> str | None:
    """Directories written before the marker: a run has ``summary.json`` and a
    ``config.yaml`` naming ``kvsim_version``; a sweep a ``sweep.yaml`` naming it; a
    plan a ``plan.json`` naming it."""
    probes = (
        ("run", "config.yaml", "kvsim_version:"),
        ("sweep", "sweep.yaml", "kvsim_version:"),
        ("plan", "plan.json", '"kvsim_version":'),
    )
    for kind, name, needle in probes:
        path = directory / name
        if kind == "run" and not (directory / "summary.json").is_file():
            continue
        try:
            if path.is_file() and needle in path.read_text(encoding="utf-8", errors="replace"):
                return kind
        except OSError:
            continue
    return None
