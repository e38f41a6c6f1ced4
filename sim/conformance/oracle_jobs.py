"""Running one of the vLLM oracle drivers (``offload_driver.py``, ``pd_driver.py``) on
a list of jobs, in the oracle's own interpreter, and reading what the jobs wrote."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any


def run_oracle_jobs(
    vllm_python: str,
    driver: Path,
    jobs: list[dict[str, Any]],
    work: Path,
    timeout: float,
    what: str,
) -> None:
    """Write ``jobs`` to ``work/jobs.json`` and run ``driver`` on it with
    ``vllm_python`` (at most ``timeout`` seconds); each job writes its own ``out`` file.
    RuntimeError with the end of the driver's stderr when it fails (``what`` names the
    oracle in the message)."""
    (work / "jobs.json").write_text(json.dumps(jobs))
    proc = subprocess.run(
        [vllm_python, str(driver), str(work / "jobs.json")],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the vLLM {what} oracle failed:\n" + proc.stderr[-3000:])


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a driver's output file, one per non-blank line."""
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
