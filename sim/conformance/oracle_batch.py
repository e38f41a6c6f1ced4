"""The vLLM oracle's batch process of the differential run (``vllm_driver.py batch``,
run by the vLLM environment's interpreter): starting it on a list of jobs, waiting
for it, the error it logged for one job, and reading what a job wrote.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

DRIVER = Path(__file__).resolve().parent / "vllm_driver.py"


class OracleError(RuntimeError):
    """The vLLM oracle process could not run (bad interpreter, import error, timeout)."""


def read_lines(path: Path) -> list[dict[str, Any]] | None:
    """The JSON lines a job wrote to ``path``; None when it wrote nothing."""
    if not path.exists():
        return None
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


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


def job_error(stderr: str, index: int) -> str:
    """The line the oracle logged for the failure of job ``index`` ("no output" when
    it logged none)."""
    for line in stderr.splitlines():
        if line.startswith(f"job {index} ") and "done in" not in line:
            return line
    return "no output"


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
        return [read_lines(work / f"s{i}.jsonl") for i in range(len(step_cases))]
