"""Sweep points whose verdict is undecided run again, longer (``length.max_factor``)."""

from __future__ import annotations

import json
from pathlib import Path

from sim_run_helpers import write_yaml

from sim.sweep import run_sweep

CHAT_40 = {
    "seed": 0,
    "arrival": {"type": "poisson", "rate": 40.0},
    "prompt_len": {"type": "lognormal", "median": 200, "p90": 900, "max": 4096},
    "output_len": {"type": "lognormal", "median": 150, "p90": 600, "max": 2048},
    "num_requests": 1000,
}


def _summary(out: Path) -> dict:
    (point,) = [p for p in (out / "points").iterdir() if not p.name.startswith(".")]
    return json.loads((point / "summary.json").read_text())


def test_an_undecided_point_runs_again_longer(tmp_path: Path) -> None:
    workload = write_yaml(tmp_path / "chat40.yaml", CHAT_40)
    results = {}
    for factor in (1, 2):
        spec = write_yaml(
            tmp_path / f"sweep{factor}.yaml",
            {
                "name": f"len{factor}",
                "base": {"workload": str(workload)},
                "axes": [{"path": "engine.max_num_seqs", "values": [1024]}],
                "length": {"max_factor": factor},
            },
        )
        run_sweep(spec, tmp_path / f"out{factor}", jobs=1, render=False)
        results[factor] = _summary(tmp_path / f"out{factor}")
    # 1,000 requests at 40 req/s leave the engine still filling (tests/test_window.py).
    assert results[1]["verdict"]["state"] == "undecided"
    assert results[1]["num_requests"] == 1000
    assert results[2]["num_requests"] == 2000
