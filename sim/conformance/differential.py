"""Randomized differential conformance: kvcore against vLLM's own core.

Step traces (:mod:`sim.conformance.generate`), op sequences (:mod:`sim.conformance.ops`),
sizing cases (:mod:`sim.conformance.sizing`) and as many CUDA graph capture-size cases
(:mod:`sim.conformance.cudagraph`) go through vLLM in ONE oracle process
(``vllm_driver.py batch``, run by the vLLM environment's interpreter) while kvcore
replays them here, in parallel. Every step / op line must be equal; on a mismatch the
first differing line of both sides (only the differing fields) is reported and the case
is written to ``out_dir`` as ``<name>.trace.json`` + ``<name>.config.json`` (or
``.ops.json``), ready for ``vllm_driver.py steps|ops`` and ``kvsim replay``.

With ``async_scheduling`` every step case runs vLLM's ``AsyncScheduler`` behind its
own engine-core batch queue (``EngineCore.step_with_batch_queue``) against kvcore's
:class:`~kvcore.async_scheduler.AsyncScheduler` behind :class:`~kvcore.batch_queue.BatchQueue`;
the traces and knobs are those of the synchronous cases.

``python -m sim.conformance.differential [--vllm-python P] [--traces N] [--seed S]
[--async-scheduling]`` runs it without the table of ``kvsim conformance``.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.conformance import DEFAULT_SEED
from sim.conformance import ops as ops_mod
from sim.conformance import sizing as sizing_mod
from sim.conformance.compare import Diff, first_line_diff, first_sizing_diff
from sim.conformance.cudagraph import random_cudagraph_case, run_kvsim_cudagraph
from sim.conformance.generate import random_case
from sim.conformance.oracle_batch import (
    job_error,
    read_lines,
    start_oracle,
    wait_oracle,
)
from sim.conformance.replay_kvcore import replay_command, run_kvcore_steps
from sim.conformance.report import Mismatch, Report, write_case

REPO = Path(__file__).resolve().parents[2]
DEFAULT_VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
MIRRORED_VLLM = "0.33.0"

StepCase = tuple[dict[str, Any], list[dict[str, Any]]]
"""A step case (config, trace), or an op case (config, ops)."""


def first_step_mismatch(
    theirs: list[dict[str, Any]] | None, ours: list[dict[str, Any]] | str
) -> Diff | None:
    """The first difference of one step case's lines (a failure on either side is a
    difference of its own)."""
    return _steps_diff(theirs, ours, "vLLM failed on the case")


@dataclass
class _Cases:
    """The random cases of one run, by kind, and the oracle's jobs for them."""

    steps: list[StepCase]
    ops: list[StepCase]
    sizing: list[dict[str, Any]]
    cudagraphs: list[dict[str, Any]]

    def oracle_jobs(self, work: Path) -> list[dict[str, Any]]:
        """One oracle job per case (the CUDA graph cases in one job), in that order;
        each writes its output to ``work``."""
        jobs: list[dict[str, Any]] = []
        for i, (config, trace) in enumerate(self.steps):
            jobs.append(
                {
                    "mode": "steps",
                    "trace": trace,
                    "config": config,
                    "out": str(work / f"steps{i}.jsonl"),
                }
            )
        for i, (config, op_list) in enumerate(self.ops):
            jobs.append(
                {
                    "mode": "ops",
                    "ops": op_list,
                    "config": config,
                    "out": str(work / f"ops{i}.jsonl"),
                }
            )
        for i, config in enumerate(self.sizing):
            jobs.append({"mode": "sizing", "config": config, "out": str(work / f"sizing{i}.json")})
        if self.cudagraphs:
            jobs.append(
                {
                    "mode": "cudagraph",
                    "cases": self.cudagraphs,
                    "out": str(work / "cudagraph.jsonl"),
                }
            )
        return jobs


@dataclass
class _Checks:
    """The comparison of the oracle's outputs with kvcore's, kind by kind: the report
    they fill, the oracle's output folder and stderr, where mismatching cases go."""

    report: Report
    work: Path
    stderr: str
    out_dir: Path

    def steps(self, cases: list[StepCase], ours: list[Any]) -> None:
        """Compare the step cases (oracle jobs 0, 1, ...)."""
        report = self.report
        for i, ((config, trace), mine) in enumerate(zip(cases, ours)):
            theirs = read_lines(self.work / f"steps{i}.jsonl")
            report.traces += 1
            if theirs and report.vllm_version is None:
                report.vllm_version = theirs[0].get("vllm_version")
            diff = _steps_diff(theirs, mine, job_error(self.stderr, i))
            report.steps += sum(1 for x in (theirs or []) if x.get("type") == "step")
            if diff:
                name = f"steps_seed{report.seed}_case{i}"
                name += "_async" if report.async_scheduling else ""
                name += "_spec" if report.spec_decode else ""
                files = write_case(self.out_dir, name, {"trace": trace, "config": config})
                files.append("kvsim replay " + replay_command(config, files[0]))
                report.mismatches.append(Mismatch("steps", i, diff, files))

    def ops(self, cases: list[StepCase], ours: list[Any], first_job: int) -> None:
        """Compare the op cases (oracle jobs ``first_job``, ``first_job + 1``, ...)."""
        report = self.report
        for i, ((config, op_list), mine) in enumerate(zip(cases, ours)):
            theirs = read_lines(self.work / f"ops{i}.jsonl")
            report.op_cases += 1
            report.ops += len(op_list)
            error = job_error(self.stderr, first_job + i)
            diff = _steps_diff(theirs, mine, error, kind="op", label="i")
            if diff:
                name = f"ops_seed{report.seed}_case{i}"
                files = write_case(self.out_dir, name, {"ops": op_list, "config": config})
                report.mismatches.append(Mismatch("ops", i, diff, files))

    def sizing(self, cases: list[dict[str, Any]], ours: list[Any]) -> None:
        """Compare the sizing cases."""
        report = self.report
        for i, (config, mine) in enumerate(zip(cases, ours)):
            path = self.work / f"sizing{i}.json"
            theirs = json.loads(path.read_text()) if path.exists() else None
            report.sizing_cases += 1
            diff = first_sizing_diff(theirs, mine)
            if diff:
                name = f"sizing_seed{report.seed}_case{i}"
                files = write_case(self.out_dir, name, {"config": config})
                report.mismatches.append(Mismatch("sizing", i, diff, files))

    def cudagraphs(self, cases: list[dict[str, Any]]) -> None:
        """Compare the CUDA graph capture sizes (kvsim's computed here)."""
        report = self.report
        theirs_graphs = (read_lines(self.work / "cudagraph.jsonl") or []) if cases else []
        for i, case in enumerate(cases):
            report.cudagraph_cases += 1  # no line from the oracle: its sizes are None
            theirs_sizes = theirs_graphs[i]["sizes"] if i < len(theirs_graphs) else None
            ours_sizes = run_kvsim_cudagraph(case)
            if theirs_sizes != ours_sizes:
                diff = Diff("sizes", {"sizes": theirs_sizes}, {"sizes": ours_sizes})
                name = f"cudagraph_seed{report.seed}_case{i}"
                files = write_case(self.out_dir, name, {"case": case})
                report.mismatches.append(Mismatch("cudagraph", i, diff, files))


def run(
    num_traces: int = 200,
    seed: int = DEFAULT_SEED,
    vllm_python: str | None = None,
    out_dir: str | Path = "conformance-failures",
    num_op_cases: int = 40,
    num_sizing_cases: int = 40,
    timeout: float = 900.0,
    progress: Callable[[str], None] | None = None,
    async_scheduling: bool = False,
    spec_decode: bool = False,
) -> Report:
    """Run the comparison; see the module docstring. Raises :class:`OracleError`."""
    t0 = time.perf_counter()
    python = str(vllm_python or DEFAULT_VLLM_PYTHON)
    report = Report(seed=seed, async_scheduling=async_scheduling, spec_decode=spec_decode)
    cases = _Cases(
        [random_case(seed, i, async_scheduling, spec_decode) for i in range(num_traces)],
        [ops_mod.random_ops_case(seed, i) for i in range(num_op_cases)],
        [sizing_mod.random_sizing_case(seed, i) for i in range(num_sizing_cases)],
        [random_cudagraph_case(seed, i) for i in range(num_sizing_cases)],
    )
    with tempfile.TemporaryDirectory(prefix="kvsim-conformance-") as tmp:
        work = Path(tmp)
        jobs = cases.oracle_jobs(work)
        proc = start_oracle(python, jobs, work)
        if progress:
            progress(f"vLLM oracle started on {len(jobs)} jobs; kvcore replaying")
        ours_steps = [run_kvcore_steps(config, trace) for config, trace in cases.steps]
        ours_ops = [ops_mod.run_kvcore_ops(config, op_list) for config, op_list in cases.ops]
        ours_sizing = [sizing_mod.run_kvcore_sizing(config) for config in cases.sizing]
        checks = _Checks(report, work, wait_oracle(proc, timeout), Path(out_dir))
        checks.steps(cases.steps, ours_steps)
        checks.ops(cases.ops, ours_ops, len(cases.steps))
        checks.sizing(cases.sizing, ours_sizing)
        checks.cudagraphs(cases.cudagraphs)
    report.wall_s = time.perf_counter() - t0
    return report


def _steps_diff(
    theirs: list[dict[str, Any]] | None,
    ours: list[dict[str, Any]] | str,
    error: str,
    kind: str = "step",
    label: str = "step",
) -> Diff | None:
    """Compare one case; a failure on either side is a mismatch of its own."""
    if theirs is None or isinstance(ours, str):
        if theirs is None and isinstance(ours, str):
            return None  # both sides refuse the case
        return Diff(
            "run",
            {"error": error if theirs is None else None},
            {"error": ours if isinstance(ours, str) else None},
        )
    return first_line_diff(theirs, ours, kind, label)


def main(argv: list[str] | None = None) -> int:
    """Command line without rich: prints mismatches; exit 1 when any."""
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vllm-python", default=None)
    p.add_argument("--traces", type=int, default=200)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--out-dir", default="conformance-failures")
    p.add_argument("--async-scheduling", action="store_true")
    args = p.parse_args(argv)
    report = run(
        args.traces,
        args.seed,
        args.vllm_python,
        args.out_dir,
        progress=print,
        async_scheduling=args.async_scheduling,
    )
    for m in report.mismatches:
        print(m.render())
    print(
        f"seed {report.seed}: {report.traces} traces ({report.steps} steps), "
        f"{report.op_cases} op cases ({report.ops} ops), {report.sizing_cases} sizing cases, "
        f"{report.cudagraph_cases} CUDA graph cases; "
        f"{len(report.mismatches)} mismatches; vLLM {report.vllm_version}; "
        f"{report.wall_s:.1f} s"
    )
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
