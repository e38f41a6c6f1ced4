"""The example sweeps in workloads/sweeps/, run end to end at a reduced size.

Each example keeps its base and axes but runs about 40 requests per point (``--scale``)
and a subset of each axis's values, so the whole module stays within seconds.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import yaml

from sim.sweep import run_sweep
from workloads.loader import PRESET_DIR

SWEEPS = Path(__file__).resolve().parent.parent / "workloads" / "sweeps"
REQUESTS = 40


def reduced(name: str, tmp_path: Path, keep: dict[str, list[Any]], seeds: list[int]) -> Path:
    """A copy of example ``name`` with only the ``keep`` values of its axes (and runs
    that are never lengthened)."""
    data = yaml.safe_load((SWEEPS / f"{name}.yaml").read_text())
    for axis in data["axes"]:
        values = keep.get(axis["path"], axis["values"])
        assert set(values) <= set(axis["values"]), f"{axis['path']}: {values}"
        axis["values"] = values
    data["seeds"] = seeds
    # Scaled down to a few dozen requests, points are often undecided; these tests check
    # the examples' shapes, not verdicts: no second, longer run.
    data["length"] = {"max_factor": 1}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def scale_for(preset: str) -> float:
    spec = yaml.safe_load((PRESET_DIR / f"{preset}.yaml").read_text())
    return REQUESTS / spec["num_requests"]


def run_example(path: Path, out: Path, preset: str) -> list[dict[str, str]]:
    result = run_sweep(path, out, jobs=2, scale=scale_for(preset))
    assert not result.errors, result.errors
    assert (out / "report.html").is_file()
    with (out / "sweep.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == result.num_points
    assert {r["status"] for r in rows} == {"ok"}, [r["error"] for r in rows]
    assert {r["num_requests"] for r in rows} == {str(REQUESTS)}
    return rows


def mean_by(rows: list[dict[str, str]], key: str, metric: str) -> dict[float, float]:
    groups: dict[float, list[float]] = {}
    for r in rows:
        groups.setdefault(float(r[key]), []).append(float(r[metric]))
    return {k: sum(v) / len(v) for k, v in sorted(groups.items())}


def test_every_example_is_a_valid_spec() -> None:
    from sim.sweep import prepare

    names = sorted(p.stem for p in SWEEPS.glob("*.yaml"))
    assert names == [
        "agent-routers",
        "chat-qps",
        "kv-cliff",
        "pd-ratio",
        "rag-prefix-caching",
        "spec-decode-k",
    ]
    for name in names:
        prepare(SWEEPS / f"{name}.yaml")


def test_chat_qps(tmp_path: Path) -> None:
    path = reduced("chat-qps", tmp_path, {"workload.arrival.rate": [2, 16, 64]}, [0])
    rows = run_example(path, tmp_path / "out", "chat")
    throughput = [float(r["throughput_rps"]) for r in rows]
    assert throughput == sorted(throughput)
    plots = {p.name for p in (tmp_path / "out" / "plots").glob("*.png")}
    assert {"throughput.png", "latency.png", "preemptions.png", "kv_usage.png"} <= plots


def test_preemption_rate_rises_as_kv_blocks_shrink(tmp_path: Path) -> None:
    """The kv-cliff example at 16 req/s: fewer blocks, more preemptions per request
    (mean over two seeds; a rise of at most 0.05 between neighbours counts as noise)."""
    blocks = [300, 450, 700, 2500]
    keep = {"engine.num_gpu_blocks_override": blocks, "workload.arrival.rate": [16]}
    path = reduced("kv-cliff", tmp_path, keep, [0, 1])
    rows = run_example(path, tmp_path / "out", "chat")
    rate = mean_by(rows, "engine.num_gpu_blocks_override", "preemptions_per_request")
    shrinking = [rate[b] for b in sorted(blocks, reverse=True)]
    assert all(b >= a - 0.05 for a, b in zip(shrinking, shrinking[1:])), rate
    assert shrinking[-1] > shrinking[0] + 0.1, rate
    assert shrinking[0] == 0.0, rate
    assert (tmp_path / "out" / "plots" / "preemptions.png").is_file()


def test_rag_prefix_caching(tmp_path: Path) -> None:
    path = reduced("rag-prefix-caching", tmp_path, {"workload.arrival.rate": [4]}, [0])
    rows = run_example(path, tmp_path / "out", "rag")
    hits = {r["engine.enable_prefix_caching"]: float(r["prefix_cache_hit_rate"]) for r in rows}
    ttft = {r["engine.enable_prefix_caching"]: float(r["ttft_s_p50"]) for r in rows}
    assert hits["false"] == 0.0 and hits["true"] > 0.5, hits
    assert ttft["true"] < ttft["false"], ttft


def test_agent_routers(tmp_path: Path) -> None:
    keep = {"router": ["round_robin", "prefix_aware"], "workload.arrival.rate": [2]}
    path = reduced("agent-routers", tmp_path, keep, [0])
    rows = run_example(path, tmp_path / "out", "agent")
    hits = {r["router"]: float(r["prefix_cache_hit_rate"]) for r in rows}
    assert hits["prefix_aware"] > hits["round_robin"], hits


def test_spec_decode_k(tmp_path: Path) -> None:
    """At light load, n-gram speculative decoding lowers TPOT against k = 0 (off)."""
    k = "engine.speculative_config.num_speculative_tokens"
    path = reduced("spec-decode-k", tmp_path, {k: [0, 3], "workload.arrival.rate": [2]}, [0])
    rows = run_example(path, tmp_path / "out", "chat")
    tpot = mean_by(rows, k, "tpot_s_mean")
    assert tpot[3.0] < tpot[0.0], tpot


def test_pd_ratio(tmp_path: Path) -> None:
    """Four colocated replicas and three prefill:decode splits of four GPUs: the P/D
    points report their pools and transfers; the colocated one has no pd column."""
    path = reduced("pd-ratio", tmp_path, {"workload.arrival.rate": [20]}, [0])
    rows = run_example(path, tmp_path / "out", "rag")
    assert [r["pd"] for r in rows][1:] == [
        "prefill=1,decode=3",
        "prefill=2,decode=2",
        "prefill=3,decode=1",
    ]
    for r in rows[1:]:
        point = tmp_path / "out" / "points" / r["point_id"]
        summary = json.loads((point / "summary.json").read_text())
        pd = summary["pd"]
        assert pd["transfers"]["count"] == REQUESTS
        assert pd["prefill"]["replicas"] + pd["decode"]["replicas"] == 4
