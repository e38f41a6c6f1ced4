"""A MoE model's DP ranks step in lockstep (vLLM's ``DPEngineCoreProc``); a dense
model's DP ranks do not.

Qwen3-30B-A3B (the public DP 2 + EP run's model) on two RTX PRO 6000s: every step of
one rank that overlaps a step of the other starts and ends with it (one forward on
both ranks, as long as the slower rank's), in both engine loops. Llama-3.1-8B with the
same DP size: its ranks are independent engines, whose steps overlap freely.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml
from sim_run_helpers import write_yaml

from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec, run

REPO = Path(__file__).resolve().parent.parent
GROUND_TRUTH = REPO / "scripts" / "ground_truth"
WORKLOAD = {
    "arrival": {"type": "poisson", "rate": 8},
    "prompt_len": {"type": "uniform", "min": 200, "max": 3000},
    "output_len": {"type": "uniform", "min": 20, "max": 200},
    "num_requests": 36,
    "seed": 3,
}


def _run(
    tmp_path: Path, model: str, name: str, check: bool = False, **engine
) -> tuple[dict, list[dict], str]:
    spec = RunSpec(
        workload=str(write_yaml(tmp_path / "wl.yaml", WORKLOAD)),
        model=model,
        gpu="RTX-PRO-6000",
        engine=EngineConfig(
            data_parallel_size=2, enable_expert_parallel=True, max_model_len=8192, **engine
        ),
        num_replicas=2,
        router="least_outstanding",
        check=check,  # the scheduler's and KV cache's invariants after every step
    )
    out = tmp_path / name
    summary = run(spec, out, render=False, helpers=False)
    with (out / "steps.csv").open() as f:
        steps = list(csv.DictReader(f))
    return summary, steps, (out / "config.yaml").read_text()


def _overlaps(steps: list[dict]) -> tuple[int, int]:
    """``(aligned, misaligned)``: pairs of steps of the two ranks that overlap in time
    with the same start and end, and those that overlap otherwise."""
    by_rank = [
        [(float(s["start_s"]), float(s["start_s"]) + float(s["duration_s"])) for s in steps
         if int(s["replica"]) == r]
        for r in (0, 1)
    ]  # fmt: skip
    aligned = misaligned = 0
    for a0, a1 in by_rank[0]:
        for b0, b1 in by_rank[1]:
            if a0 < b1 - EPS and b0 < a1 - EPS:  # (within steps.csv rounding)
                same = abs(a0 - b0) < EPS and abs(a1 - b1) < EPS
                aligned += same
                misaligned += not same
    return aligned, misaligned


EPS = 1e-5  # s: steps.csv keeps 9 significant digits
MOE = str(GROUND_TRUTH / "Qwen3-30B-A3B-Instruct-2507.json")


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_moe_dp_ranks_step_together(tmp_path, async_scheduling):
    summary, steps, config = _run(
        tmp_path, MOE, "moe", check=True, async_scheduling=async_scheduling
    )
    assert summary["num_finished"] == 36
    aligned, misaligned = _overlaps(steps)
    assert aligned > 50 and misaligned == 0
    doc = yaml.safe_load(config)
    assert "1 DP groups of 2 ranks" in doc["dp_lockstep"]
    assert doc["fast_forward"].startswith("off")


def test_dense_dp_ranks_are_independent(tmp_path):
    summary, steps, config = _run(tmp_path, "Llama-3.1-8B", "dense")
    assert summary["num_finished"] == 36
    _, misaligned = _overlaps(steps)
    assert misaligned > 0
    assert "dp_lockstep" not in yaml.safe_load(config)


def test_lockstep_slows_each_rank_to_the_slower_one(tmp_path, monkeypatch):
    """Lockstep can only lengthen a rank's steps: the same requests on the same ranks
    take longer per output token than on ranks stepping independently."""
    from sim.app.setup import ResolvedRun

    locked, _, _ = _run(tmp_path, MOE, "locked", async_scheduling=False)
    monkeypatch.setattr(ResolvedRun, "dp_lockstep", property(lambda self: False))
    free, _, config = _run(tmp_path, MOE, "free", async_scheduling=False)
    assert "dp_lockstep" not in yaml.safe_load(config)
    assert locked["tpot_s"]["mean"] > free["tpot_s"]["mean"]
    assert locked["num_steps"] < free["num_steps"]  # shared forwards: fewer, longer
