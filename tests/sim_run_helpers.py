"""Helpers of the ``tests/test_sim_*.py`` acceptance tests of ``kvsim run``.

They write workload files into a test's ``tmp_path``, run one simulation through
``sim.app.run.run`` (the function behind ``kvsim run``) or through the CLI in a
subprocess, and read the run directory back.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec, run

REPO = Path(__file__).resolve().parent.parent


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as YAML to ``path``; return the path."""
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Write one JSON object per line to ``path``; return the path."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_sim(
    workload: str | Path,
    out: Path,
    *,
    seed: int | None = None,
    decisions: bool = False,
    model: str = "Llama-3.1-8B",
    gpu: str = "H100-SXM",
    check: bool = False,
    fast_forward: bool = True,
    render: bool = True,
    **engine: Any,
) -> dict[str, Any]:
    """One ``kvsim run`` in this process; ``engine`` are EngineConfig fields."""
    spec = RunSpec(
        workload=str(workload),
        model=model,
        gpu=gpu,
        engine=EngineConfig(**engine),
        seed=seed,
        decisions=decisions,
        check=check,
        fast_forward=fast_forward,
    )
    return run(spec, out, render=render)


def read_csv(path: Path) -> tuple[list[str], dict[str, list[str]]]:
    """The header and the columns (as strings) of a CSV file."""
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = list(reader)
    return header, {name: [r[i] for r in rows] for i, name in enumerate(header)}


def column(cols: dict[str, list[str]], name: str) -> np.ndarray:
    """One numeric column as float64."""
    return np.asarray([float(v) for v in cols[name]], dtype=np.float64)


def kvsim_cli(
    *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m sim.cli ARGS`` in a subprocess (stdout and stderr captured)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "sim.cli", *args],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
