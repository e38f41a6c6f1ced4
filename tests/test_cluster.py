"""Multi-replica clusters: one replica is exactly a plain run; routers spread load;
prefix-aware routing beats round robin on the agent preset's prefix hit rate."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest
import yaml
from sim_run_helpers import write_yaml

from sim.app.run import RunSpec, run
from workloads.loader import PRESET_DIR


def _preset(tmp_path: Path, name: str, **changes) -> Path:
    data = yaml.safe_load((PRESET_DIR / f"{name}.yaml").read_text())
    arrival = changes.pop("rate", None)
    if arrival is not None:
        data["arrival"]["rate"] = arrival
    data.update(changes)
    return write_yaml(tmp_path / f"{name}.yaml", data)


def test_one_replica_is_a_plain_run(tmp_path: Path) -> None:
    wl = _preset(tmp_path, "chat", num_requests=60)
    plain = run(RunSpec(workload=str(wl), decisions=True), tmp_path / "plain", render=False)
    one = run(
        RunSpec(workload=str(wl), decisions=True, num_replicas=1, router="prefix_aware"),
        tmp_path / "one",
        render=False,
    )
    for name in ("steps.csv", "requests.csv", "decisions.jsonl", "config.yaml"):
        assert filecmp.cmp(tmp_path / "plain" / name, tmp_path / "one" / name, shallow=False)
    assert sorted(p.name for p in (tmp_path / "plain").iterdir()) == sorted(
        p.name for p in (tmp_path / "one").iterdir()
    )
    assert plain["num_replicas"] == one["num_replicas"] == 1
    assert [r["num_finished"] for r in one["replicas"]] == [60]


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding", "least_kv"])
def test_replicas_share_the_load(tmp_path: Path, router: str) -> None:
    wl = _preset(tmp_path, "chat", num_requests=90, rate=20.0)
    summary = run(
        RunSpec(workload=str(wl), num_replicas=3, router=router), tmp_path / router, render=False
    )
    reps = summary["replicas"]
    assert [r["replica"] for r in reps] == [0, 1, 2]
    assert sum(r["num_finished"] for r in reps) == summary["num_finished"] == 90
    assert sum(r["num_routed"] for r in reps) == 90
    assert min(r["num_finished"] for r in reps) >= 15
    requests = (tmp_path / router / "requests.csv").read_text().splitlines()[1:]
    assert {line.split(",")[1] for line in requests} == {"0", "1", "2"}


def test_prefix_aware_beats_round_robin_on_agent(tmp_path: Path) -> None:
    wl = _preset(tmp_path, "agent", num_requests=120, rate=2.0)
    hit = {}
    for router in ("round_robin", "prefix_aware"):
        summary = run(
            RunSpec(workload=str(wl), num_replicas=3, router=router),
            tmp_path / router,
            render=False,
        )
        hit[router] = summary["prefix_cache_hit_rate"]
    assert hit["prefix_aware"] > hit["round_robin"] + 0.05, hit


def test_the_recorder_must_be_for_the_clusters_replicas(tmp_path: Path) -> None:
    """The engines read the replica count from the recorder (it decides whether
    fast-forward may write rows in bulk): a cluster refuses a recorder for another."""
    import simpy

    from sim.app.setup import resolve_run
    from sim.engine.cluster import Cluster
    from sim.engine.router import make_router
    from sim.records.recorders import StepRecorder
    from sim.records.request_recorder import RequestRecorder

    resolved = resolve_run(RunSpec(workload="chat"))
    steps = StepRecorder(tmp_path / "steps.csv")
    requests = RequestRecorder(tmp_path / "requests.csv")
    try:
        with pytest.raises(ValueError, match="1 replica"):
            Cluster(simpy.Environment(), resolved, 2, make_router("round_robin"), steps, requests)
    finally:
        steps.close()
        requests.close()
    with pytest.raises(ValueError, match="num_replicas"):
        StepRecorder(tmp_path / "x.csv", num_replicas=0)
