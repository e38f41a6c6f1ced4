"""Whole-cluster checks: a candidate's replicas behind the router at the target rate.

``replicas = ceil(target / per-replica rate)`` assumes the router splits the traffic
evenly and that the per-replica search's answer holds; one simulation of the whole
cluster at the target rate, ``verify.num_requests`` long, checks both. Its measurement
window is judged against the SLOs as a plan probe's is
(:func:`sim.plan.judge.judge_summary`, at the length limit). Each check is a run
directory ``OUT/verify/<hash>-x<replicas>/seed_<s>/`` with ``verdict.json`` beside
it; a check whose ``verdict.json`` exists is reused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from sim import offload
from sim.app.engine_config import EngineConfig
from sim.app.run import NothingServed, RunSpec, run
from sim.errors import SimulationStuck
from sim.plan.judge import judge_summary
from sim.plan.spec import Length
from sim.recommend.evaluate import RUN_FILES
from sim.sweep.table import write_atomic
from workloads.overrides import WorkloadOverrides, override_spec
from workloads.spec import WorkloadSpec


def cluster_workload(base: WorkloadSpec, name: str, rate: float, num_requests: int) -> str:
    """The workload YAML of a check: ``base`` at ``rate`` req/s, ``num_requests`` long."""
    spec = override_spec(base, WorkloadOverrides(rate=rate, num_requests=num_requests), name)
    data = spec.model_dump(mode="json", exclude_none=True)
    data["name"] = base.name or name
    return yaml.safe_dump(data, sort_keys=False)


def cached_check(directory: Path, seed: int) -> dict[str, Any] | None:
    """A finished check of ``seed`` in ``directory``, or None."""
    path = Path(directory) / f"seed_{seed}.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def check_cluster(payload: dict[str, Any]) -> dict[str, Any]:
    """Run one cluster check; write and return its verdict.

    ``payload``: ``dir``, ``seed``, ``workload_yaml``, ``model``, ``gpu``, ``engine``
    (a mapping), ``replicas``, ``router``, ``slo`` (bounds by name),
    ``tensor_parallel_size``, ``keep_runs``, ``helpers``.
    """
    if not payload.get("helpers", True):
        os.environ[offload.ENV_SWITCH] = "0"
    directory = Path(payload["dir"])
    directory.mkdir(parents=True, exist_ok=True)
    workload = directory / "workload.yaml"
    if not workload.is_file() or workload.read_text() != payload["workload_yaml"]:
        write_atomic(workload, payload["workload_yaml"])
    seed = int(payload["seed"])
    run_dir = directory / f"seed_{seed}"
    spec = RunSpec(
        workload=str(workload),
        model=payload["model"],
        gpu=payload["gpu"],
        engine=EngineConfig.model_validate(payload["engine"]),
        seed=seed,
        num_replicas=int(payload["replicas"]),
        router=payload["router"],
    )
    bounds = payload["slo"]
    try:
        summary = run(spec, run_dir, render=False)
    except (SimulationStuck, NothingServed, ValueError) as e:
        verdict: dict[str, Any] = {
            "passed": False,
            "state": "failed",
            "failures": [str(e)],
            "metrics": None,
        }
    else:
        # One run, its only length: an undecided one is judged as drifting.
        judged = judge_summary(summary, bounds, Length().precision)
        window = summary.get("window") if isinstance(summary.get("window"), dict) else summary
        gpus = int(payload["replicas"]) * int(payload["tensor_parallel_size"])
        tpot = float(window["tpot_s"]["mean"])
        verdict = {
            "passed": judged["passed"],
            "state": judged["state"],
            "failures": judged["failures"],
            "metrics": judged["metrics"],
            "throughput_rps": summary["throughput_rps"],
            "tokens_per_s_per_gpu": float(f"{float(window['output_tokens_per_s']) / gpus:.6g}"),
            "tokens_per_s_per_user": float(f"{1.0 / tpot:.6g}") if tpot > 0 else None,
            "num_requests": summary["num_requests"],
        }
        if not payload.get("keep_runs", False):
            for name in RUN_FILES:
                (run_dir / name).unlink(missing_ok=True)
    verdict = {"replicas": int(payload["replicas"]), "seed": seed, **verdict}
    write_atomic(directory / f"seed_{seed}.json", json.dumps(verdict, indent=2) + "\n")
    return verdict
