"""Verdicts: steady under light load, saturated far above capacity, preemption storms
and livelock detected from crafted records."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml
from sim_run_helpers import write_yaml

from sim.engine_config import EngineConfig
from sim.run import RunSpec, run
from sim.verdict import judge, judge_run_dir
from workloads.loader import PRESET_DIR


def _chat(tmp_path: Path, rate: float, n: int) -> Path:
    data = yaml.safe_load((PRESET_DIR / "chat.yaml").read_text())
    data["arrival"]["rate"] = rate
    data["num_requests"] = n
    return write_yaml(tmp_path / f"chat_{rate}.yaml", data)


def test_light_chat_is_steady(tmp_path: Path) -> None:
    summary = run(RunSpec(workload=str(_chat(tmp_path, 2.0, 120))), tmp_path / "r", render=False)
    assert summary["verdict"]["state"] == "steady"
    assert summary["verdict"]["reasons"] == []
    assert judge_run_dir(tmp_path / "r")["state"] == "steady"


def test_overloaded_chat_is_saturated(tmp_path: Path) -> None:
    # 8 sequences at 50 ms per step: about 0.6 req/s of capacity; offered 20 req/s.
    engine = EngineConfig(max_num_seqs=8, latency_model="constant", constant_step_s=0.05)
    spec = RunSpec(workload=str(_chat(tmp_path, 20.0, 120)), engine=engine)
    verdict = run(spec, tmp_path / "r", render=False)["verdict"]
    assert verdict["state"] == "saturated"
    kinds = {r.split(":")[0] for r in verdict["reasons"]}
    assert {"queue", "throughput"} <= kinds


def _records(n_steps: int, preempt_every: int, decode: int):
    steps = pd.DataFrame(
        {
            "replica": 0,
            "start_s": [i * 0.01 for i in range(n_steps)],
            "num_waiting": 0,
            "num_decode_tokens": decode,
            "num_preempted": [1 if i % preempt_every == 0 else 0 for i in range(n_steps)],
        }
    )
    requests = pd.DataFrame(
        {
            "replica": 0,
            "arrival_s": [i * 0.1 for i in range(40)],
            "finish_s": [i * 0.1 + 0.05 for i in range(40)],
            "num_preemptions": 3,
        }
    )
    return steps, requests


def test_preemption_storm_and_livelock() -> None:
    steps, requests = _records(300, 10, decode=0)
    verdict = judge(steps, requests)
    kinds = {r.split(":")[0] for r in verdict["reasons"]}
    assert verdict["state"] == "saturated" and kinds == {"preemptions", "livelock"}
    steps, requests = _records(300, 10, decode=4)
    requests["num_preemptions"] = 0
    assert judge(steps, requests)["state"] == "steady"
