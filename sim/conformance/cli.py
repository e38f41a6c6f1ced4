"""``kvsim conformance``: the randomized kvcore-vs-vLLM comparison, as a table.

Exit status: 0 when every case matches, 1 on any mismatch, 2 on bad input (no usable
vLLM interpreter, a non-positive trace count): one ``kvsim: error: ...`` line on
stderr, no traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sim.conformance.differential import DEFAULT_VLLM_PYTHON, MIRRORED_VLLM, Report, run
from sim.conformance.oracle_batch import OracleError

_VERSION_PROBE = "import importlib.metadata as m; print(m.version('vllm'))"


class BadInput(ValueError):
    """A problem with the user's arguments or environment (exit status 2)."""


def find_vllm_python(path: str | None) -> str:
    """The interpreter to use: ``path``, else ``.venv-vllm/bin/python`` here or in kvsim's
    checkout. Raises :class:`BadInput` when there is none."""
    if path is None:
        for candidate in (Path.cwd() / ".venv-vllm" / "bin" / "python", DEFAULT_VLLM_PYTHON):
            if candidate.exists():
                return str(candidate)
        raise BadInput(
            "no vLLM environment found (.venv-vllm/bin/python); pass "
            "--vllm-python PATH, or create one with scripts/setup_vllm_oracle.sh"
        )
    p = Path(path)
    if not p.exists():
        raise BadInput(f"--vllm-python: {path} does not exist")
    if p.is_dir() or not os.access(p, os.X_OK):
        raise BadInput(f"--vllm-python: {path} is not an executable Python interpreter")
    return str(p)


def installed_vllm_version(python: str) -> str:
    """The vLLM version installed for ``python`` (without importing vLLM)."""
    try:
        proc = subprocess.run(
            [python, "-c", _VERSION_PROBE], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BadInput(f"--vllm-python: cannot run {python}: {e}") from None
    if proc.returncode != 0:
        raise BadInput(f"--vllm-python: vLLM is not installed for {python}")
    return proc.stdout.strip()


def render(report: Report, console: Console) -> None:
    """The summary table and the first mismatch in detail."""
    table = Table(title=f"kvcore vs vLLM {report.vllm_version} (seed {report.seed})")
    table.add_column("check")
    table.add_column("value", justify="right")
    table.add_row("vLLM version compared", str(report.vllm_version))
    table.add_row(
        "engine loop", "async (batch queue of 2)" if report.async_scheduling else "synchronous"
    )
    if report.spec_decode:
        table.add_row("speculative decoding", "in every trace")
    if report.pd:
        table.add_row("P/D disaggregation", "prefill and decode instances (NIXL connector)")
    table.add_row("traces run", str(report.traces))
    table.add_row("steps compared", str(report.steps))
    table.add_row("op sequences / ops compared", f"{report.op_cases} / {report.ops}")
    table.add_row("sizing cases compared", str(report.sizing_cases))
    table.add_row("CUDA graph size cases compared", str(report.cudagraph_cases))
    table.add_row(
        "mismatches",
        str(len(report.mismatches)),
        style="bold red" if report.mismatches else "green",
    )
    table.add_row("wall time", f"{report.wall_s:.1f} s")
    console.print(table)
    if report.mismatches:
        console.print("[bold]first mismatch[/bold]", highlight=False)
        console.print(report.mismatches[0].render(), markup=False, highlight=False)


def run_conformance(
    vllm_python: str | None,
    traces: int,
    seed: int,
    out_dir: str,
    op_cases: int = 40,
    sizing_cases: int = 40,
    async_scheduling: bool = False,
    spec_decode: bool = False,
    pd: bool = False,
) -> int:
    """Run the comparison and print the table; return the exit status.

    ``async_scheduling``: the step traces run through vLLM's ``AsyncScheduler`` and
    engine-core batch queue, and through kvcore's. ``spec_decode``: every step trace
    has speculative decoding. ``pd``: instead, ``traces`` P/D cases per instance role
    (prefill, decode) with vLLM's NIXL connector (``sim.conformance.pd_cases``)."""
    err = Console(stderr=True)
    try:
        if traces < 1:
            raise BadInput(f"--traces must be >= 1, got {traces}")
        python = find_vllm_python(vllm_python)
        version = installed_vllm_version(python)
    except BadInput as e:
        print(f"kvsim: error: {e}", file=sys.stderr)
        return 2
    if version != MIRRORED_VLLM:
        print(
            f"kvsim: warning: comparing with vLLM {version}; kvcore mirrors vLLM "
            f"{MIRRORED_VLLM}, so differences may be expected",
            file=sys.stderr,
        )
    args = (traces, seed, python, out_dir, op_cases, sizing_cases)

    def compare() -> Report:
        if pd:
            from sim.conformance.pd_cases import run_pd

            return run_pd(traces, seed, python, out_dir, async_scheduling=async_scheduling)
        return run(*args, async_scheduling=async_scheduling, spec_decode=spec_decode)

    try:
        if sys.stderr.isatty():
            with err.status(f"replaying {traces} traces through vLLM {version} and kvcore"):
                report = compare()
        else:
            report = compare()
    except (OracleError, RuntimeError) as e:
        print(f"kvsim: error: {e}", file=sys.stderr)
        return 2
    report.vllm_version = report.vllm_version or version
    render(report, Console())
    return 0 if report.ok else 1
