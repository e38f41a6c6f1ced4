"""Verdicts: steady under light load, saturated far above capacity, preemption storms
and livelock detected from crafted records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from sim_run_helpers import write_yaml

from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec, run
from sim.records.verdict import judge, judge_run_dir
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
            "first_token_s": [i * 0.1 + 0.01 for i in range(40)],
            "finish_s": [i * 0.1 + 0.05 for i in range(40)],
            "output_tokens": 5,
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


def _replica_summaries_from_tables(
    steps: pd.DataFrame, requests: pd.DataFrame, num_replicas: int
) -> list[dict]:
    """The per-replica summaries recomputed from a run directory's tables (the oracle
    for the in-run aggregates)."""
    ids = sorted(
        set(range(num_replicas))
        | set(steps["replica"].unique())
        | set(requests["replica"].unique())
    )
    out = []
    for r in ids:
        s = steps[steps["replica"] == r]
        q = requests[requests["replica"] == r]
        dur = s["duration_s"].to_numpy()
        usage = s["kv_usage"].to_numpy()
        queries = int(s["prefix_queries"].sum())
        out.append(
            {
                "replica": int(r),
                "num_finished": len(q),
                "num_steps": len(s),
                "num_preemptions": int(q["num_preemptions"].sum()),
                "output_tokens": int(q["output_tokens"].sum()),
                "prefix_cache_hit_rate": int(s["prefix_hits"].sum()) / queries if queries else 0.0,
                "kv_usage_mean": float(np.average(usage, weights=dur)) if dur.sum() > 0 else 0.0,
            }
        )
    return out


def test_in_run_aggregates_equal_the_records_on_disk(tmp_path: Path) -> None:
    """The verdict and per-replica summaries a run computes from its recorders equal
    those recomputed from its steps.csv / requests.csv (up to the files' 9 digits)."""
    import pandas as pd

    engine = EngineConfig(max_num_seqs=8, num_gpu_blocks_override=120, max_model_len=1900)
    spec = RunSpec(
        workload=str(_chat(tmp_path, 12.0, 150)), engine=engine, num_replicas=2, router="least_kv"
    )
    summary = run(spec, tmp_path / "r", render=False)
    assert summary["num_preemptions"] > 0
    from_disk = judge_run_dir(tmp_path / "r")
    assert summary["verdict"]["state"] == from_disk["state"] == "saturated"
    assert summary["verdict"]["reasons"] == from_disk["reasons"]
    assert summary["verdict"]["offered_rps"] == pytest.approx(from_disk["offered_rps"], rel=1e-7)
    steps = pd.read_csv(tmp_path / "r" / "steps.csv")
    requests = pd.read_csv(tmp_path / "r" / "requests.csv")
    disk = _replica_summaries_from_tables(steps, requests, 2)
    for mine, theirs in zip(summary["replicas"], disk, strict=True):
        mine = {k: v for k, v in mine.items() if k != "num_routed"}
        assert mine.keys() == theirs.keys()
        for key, value in mine.items():
            assert value == pytest.approx(theirs[key], rel=1e-6), key


def test_recorder_streaks_equal_the_table_computation(tmp_path: Path) -> None:
    """StepRecorder's running livelock streak and waiting change points give the
    verdict inputs the table computation gives, on random step sequences."""
    import random

    from sim.records.recorders import StepRecorder
    from sim.records.request_recorder import RequestRecorder
    from sim.records.step_row import StepRow
    from sim.records.verdict import VerdictInputs

    rng = random.Random(5)
    for trial in range(20):
        steps = StepRecorder(tmp_path / f"s{trial}.csv", num_replicas=2)
        rows = []
        for i in range(400):
            replica = rng.randrange(2)
            decode = 0 if rng.random() < 0.7 else rng.randrange(1, 4)
            pre = 1 if rng.random() < 0.05 else 0
            waiting = rng.choice([0, 0, 1, 2, 5])
            start = i * 0.01
            steps.add(
                StepRow(replica, i, start, 0.01, 1, waiting, 0, decode, pre, 0.5, 1, 0, 0, 0, 0)
            )
            rows.append((replica, start, waiting, decode, pre))
        steps.close()
        frame = pd.DataFrame(
            rows,
            columns=["replica", "start_s", "num_waiting", "num_decode_tokens", "num_preempted"],
        )
        empty = pd.DataFrame(
            {
                "arrival_s": [],
                "first_token_s": [],
                "finish_s": [],
                "output_tokens": [],
                "num_preemptions": [],
            }
        )
        ref = VerdictInputs.from_frames(frame, empty)
        requests = RequestRecorder(tmp_path / f"r{trial}.csv")
        requests.close()
        mine = VerdictInputs.from_recorders(steps, requests)
        assert mine.longest_no_progress == ref.longest_no_progress
        grid = [x * 0.037 for x in range(120)]
        from sim.records.verdict import _step_fn

        for (t1, v1), (t2, v2) in zip(mine.waiting, ref.waiting, strict=True):
            assert (_step_fn(t1, v1, grid) == _step_fn(t2, v2, grid)).all()
    assert ref.longest_no_progress > 0
