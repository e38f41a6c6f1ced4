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
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.conformance import DEFAULT_SEED
from sim.conformance import ops as ops_mod
from sim.conformance import sizing as sizing_mod
from sim.conformance.compare import Diff, first_line_diff, first_sizing_diff
from sim.conformance.cudagraph import random_cudagraph_case, run_kvsim_cudagraph
from sim.conformance.generate import random_case
from sim.conformance.replay_kvcore import replay_command, run_kvcore_steps

DRIVER = Path(__file__).resolve().parent / "vllm_driver.py"
REPO = Path(__file__).resolve().parents[2]
DEFAULT_VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
MIRRORED_VLLM = "0.33.0"


class OracleError(RuntimeError):
    """The vLLM oracle process could not run (bad interpreter, import error, timeout)."""


@dataclass
class Mismatch:
    """One case where kvcore and vLLM disagree (or one side failed)."""

    kind: str
    index: int
    diff: Diff
    files: list[str] = field(default_factory=list)

    def render(self) -> str:
        files = "".join(
            f"\n  {'replay' if f.startswith('kvsim ') else 'case file'}: {f}" for f in self.files
        )
        return f"{self.kind} case {self.index}: {self.diff.render()}{files}"


@dataclass
class Report:
    """What one differential run compared and found."""

    seed: int
    vllm_version: str | None = None
    async_scheduling: bool = False
    spec_decode: bool = False
    pd: bool = False
    """P/D disaggregation cases (``sim.conformance.pd_cases.run_pd``)."""
    traces: int = 0
    steps: int = 0
    op_cases: int = 0
    ops: int = 0
    sizing_cases: int = 0
    cudagraph_cases: int = 0
    """CUDA graph capture-size cases (:mod:`sim.conformance.cudagraph`), one per sizing
    case."""
    mismatches: list[Mismatch] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.mismatches


def _read_lines(path: Path) -> list[dict[str, Any]] | None:
    if not path.exists():
        return None
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _write_case(out_dir: Path, name: str, files: dict[str, Any]) -> list[str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for suffix, data in files.items():
        path = out_dir / f"{name}.{suffix}.json"
        path.write_text(json.dumps(data, indent=1) + "\n")
        paths.append(str(path))
    return paths


def start_oracle(vllm_python: str, jobs: list[dict[str, Any]], work: Path) -> subprocess.Popen:
    """Start one vLLM batch process over every job (outputs land in the job's ``out``)."""
    jobs_file = work / "jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    try:
        return subprocess.Popen(
            [vllm_python, str(DRIVER), "batch", str(jobs_file), "--keep-going"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    except OSError as e:
        raise OracleError(f"cannot start {vllm_python}: {e.strerror}") from None


def wait_oracle(proc: subprocess.Popen, timeout: float) -> str:
    """Wait for the oracle; return its stderr. Raise when it died before any job ran."""
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise OracleError(f"the vLLM oracle did not finish within {timeout:.0f} s") from None
    if proc.returncode != 0 and "job 0 " not in err:
        raise OracleError("the vLLM oracle failed:\n" + err[-3000:])
    return err


def oracle_step_lines(
    step_cases: list[tuple[dict[str, Any], list[dict[str, Any]]]],
    vllm_python: str,
    timeout: float = 900.0,
) -> list[list[dict[str, Any]] | None]:
    """vLLM's step lines for each ``(config, trace)`` case (None where it failed on
    one), from one oracle process: for comparing several kvcore variants (mutants)
    with one vLLM run."""
    with tempfile.TemporaryDirectory(prefix="kvsim-conformance-") as tmp:
        work = Path(tmp)
        jobs = [
            {"mode": "steps", "trace": trace, "config": config, "out": str(work / f"s{i}.jsonl")}
            for i, (config, trace) in enumerate(step_cases)
        ]
        wait_oracle(start_oracle(vllm_python, jobs, work), timeout)
        return [_read_lines(work / f"s{i}.jsonl") for i in range(len(step_cases))]


def first_step_mismatch(
    theirs: list[dict[str, Any]] | None, ours: list[dict[str, Any]] | str
) -> Diff | None:
    """The first difference of one step case's lines (a failure on either side is a
    difference of its own)."""
    return _steps_diff(theirs, ours, "vLLM failed on the case")


def _job_error(stderr: str, index: int) -> str:
    for line in stderr.splitlines():
        if line.startswith(f"job {index} ") and "done in" not in line:
            return line
    return "no output"


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
    out_dir = Path(out_dir)
    step_cases = [random_case(seed, i, async_scheduling, spec_decode) for i in range(num_traces)]
    op_cases = [ops_mod.random_ops_case(seed, i) for i in range(num_op_cases)]
    sizing_cases = [sizing_mod.random_sizing_case(seed, i) for i in range(num_sizing_cases)]
    graph_cases = [random_cudagraph_case(seed, i) for i in range(num_sizing_cases)]
    with tempfile.TemporaryDirectory(prefix="kvsim-conformance-") as tmp:
        work = Path(tmp)
        jobs: list[dict[str, Any]] = []
        for i, (config, trace) in enumerate(step_cases):
            jobs.append(
                {
                    "mode": "steps",
                    "trace": trace,
                    "config": config,
                    "out": str(work / f"steps{i}.jsonl"),
                }
            )
        for i, (config, op_list) in enumerate(op_cases):
            jobs.append(
                {
                    "mode": "ops",
                    "ops": op_list,
                    "config": config,
                    "out": str(work / f"ops{i}.jsonl"),
                }
            )
        for i, config in enumerate(sizing_cases):
            jobs.append({"mode": "sizing", "config": config, "out": str(work / f"sizing{i}.json")})
        if graph_cases:
            jobs.append(
                {"mode": "cudagraph", "cases": graph_cases, "out": str(work / "cudagraph.jsonl")}
            )
        proc = start_oracle(python, jobs, work)
        if progress:
            progress(f"vLLM oracle started on {len(jobs)} jobs; kvcore replaying")
        ours_steps = [run_kvcore_steps(config, trace) for config, trace in step_cases]
        ours_ops = [ops_mod.run_kvcore_ops(config, op_list) for config, op_list in op_cases]
        ours_sizing = [sizing_mod.run_kvcore_sizing(config) for config in sizing_cases]
        stderr = wait_oracle(proc, timeout)
        job = 0
        for i, ((config, trace), ours) in enumerate(zip(step_cases, ours_steps)):
            theirs = _read_lines(work / f"steps{i}.jsonl")
            report.traces += 1
            if theirs and report.vllm_version is None:
                report.vllm_version = theirs[0].get("vllm_version")
            diff = _steps_diff(theirs, ours, _job_error(stderr, job))
            report.steps += sum(1 for x in (theirs or []) if x.get("type") == "step")
            if diff:
                name = f"steps_seed{seed}_case{i}" + ("_async" if async_scheduling else "")
                name += "_spec" if spec_decode else ""
                files = _write_case(out_dir, name, {"trace": trace, "config": config})
                files.append("kvsim replay " + replay_command(config, files[0]))
                report.mismatches.append(Mismatch("steps", i, diff, files))
            job += 1
        for i, ((config, op_list), ours) in enumerate(zip(op_cases, ours_ops)):
            theirs = _read_lines(work / f"ops{i}.jsonl")
            report.op_cases += 1
            report.ops += len(op_list)
            diff = _steps_diff(theirs, ours, _job_error(stderr, job), kind="op", label="i")
            if diff:
                name = f"ops_seed{seed}_case{i}"
                files = _write_case(out_dir, name, {"ops": op_list, "config": config})
                report.mismatches.append(Mismatch("ops", i, diff, files))
            job += 1
        for i, (config, ours) in enumerate(zip(sizing_cases, ours_sizing)):
            path = work / f"sizing{i}.json"
            theirs = json.loads(path.read_text()) if path.exists() else None
            report.sizing_cases += 1
            diff = first_sizing_diff(theirs, ours)
            if diff:
                name = f"sizing_seed{seed}_case{i}"
                files = _write_case(out_dir, name, {"config": config})
                report.mismatches.append(Mismatch("sizing", i, diff, files))
            job += 1
        theirs_graphs = (_read_lines(work / "cudagraph.jsonl") or []) if graph_cases else []
        for i, case in enumerate(graph_cases):
            report.cudagraph_cases += 1  # no line from the oracle: its sizes are None
            theirs_sizes = theirs_graphs[i]["sizes"] if i < len(theirs_graphs) else None
            ours_sizes = run_kvsim_cudagraph(case)
            if theirs_sizes != ours_sizes:
                diff = Diff("sizes", {"sizes": theirs_sizes}, {"sizes": ours_sizes})
                files = _write_case(out_dir, f"cudagraph_seed{seed}_case{i}", {"case": case})
                report.mismatches.append(Mismatch("cudagraph", i, diff, files))
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
