"""Reports an operator reads without opening a file.

- A run report says its verdict and reasons in sentences, its figures in ms / % /
  req/s, the KV budget (blocks x block size, GiB, where it came from), and draws
  per-replica small multiples for a cluster.
- ``kvsim sweep`` ends with a results table (readable point names, verdicts, ms) and
  the headline; the sweep report names points by their axis values and links each to
  its own report.
- ``kvsim plan`` ends with its probe table (ms) and the answer in a sentence.
- Axis names carry units.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from sim_run_helpers import kvsim_cli, write_yaml

from reports.axis_names import axis_label, point_name, short_name
from reports.run_facts import budget_line, reason_sentence, verdict_text
from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec, run


def test_axis_names_carry_units() -> None:
    assert axis_label("workload.arrival.rate") == "arrival rate (req/s)"
    assert axis_label("engine.num_gpu_blocks_override") == "KV blocks per replica (blocks)"
    assert axis_label("workload.sessions.think_s") == "think_s (s)"
    assert axis_label("router") == "router"
    paths = ["workload.prompt_len.median", "workload.output_len.median"]
    assert [short_name(p, paths) for p in paths] == ["prompt_len.median", "output_len.median"]
    values = {"workload.arrival.rate": 8.0, "router": "least_kv"}
    assert point_name(values, 0) == "rate=8, router=least_kv, seed 0"


def test_verdict_reasons_read_as_sentences() -> None:
    assert reason_sentence("queue: the waiting queue grows by 2 req/s") == (
        "The waiting queue grows by 2 req/s."
    )
    assert reason_sentence("preemptions: 3 per request (storm above 1)") == (
        "Preemption storm: 3 per request (storm above 1)."
    )
    summary = {
        "verdict": {"state": "saturated", "reasons": ["livelock: 120 steps"], "notes": []},
        "window": {"offered_rps": 12.5},
    }
    state, head, lines = verdict_text(summary)
    assert state == "saturated" and head.startswith("Saturated: ")
    assert "(offered 12.50 req/s)." in head and lines == ["Livelock: 120 steps."]


@pytest.fixture(scope="module")
def saturated_cluster(tmp_path_factory):
    """Two replicas with a small KV cache, offered far more than they serve."""
    base = tmp_path_factory.mktemp("sat")
    workload = write_yaml(
        base / "w.yaml",
        {
            "seed": 1,
            "arrival": {"type": "poisson", "rate": 200.0},
            "prompt_len": {"type": "uniform", "min": 100, "max": 400},
            "output_len": {"type": "uniform", "min": 50, "max": 300},
            "num_requests": 400,
        },
    )
    spec = RunSpec(
        workload=str(workload),
        engine=EngineConfig(num_gpu_blocks_override=200, max_model_len=1024),
        num_replicas=2,
    )
    out = base / "run"
    return out, run(spec, out)


def test_saturated_cluster_report(saturated_cluster) -> None:
    out, summary = saturated_cluster
    assert summary["verdict"]["state"] == "saturated"
    page = (out / "report.html").read_text()
    assert "Saturated: the configuration cannot keep up" in page
    for reason in summary["verdict"]["reasons"]:  # each reason, as a sentence
        assert reason.partition(": ")[2].rstrip(".") in page.replace("&#x27;", "'")
    kv = summary["window"]["kv_usage"]
    assert (
        f"KV cache in the measurement window: {kv['mean']:.0%} in use on average, peak "
        f"{kv['max']:.0%} of 200 blocks; {summary['num_preemptions']:,} preemptions"
    ) in page
    assert "200 blocks x 16 tokens = 3,200 tokens per replica" in page
    assert "Set by num_gpu_blocks_override" in page
    pngs = sorted(p.name for p in (out / "plots").glob("*.png"))
    assert pngs == ["latency.png", "replicas.png", "timeline.png"]
    assert page.count("data:image/png;base64,") == 3
    ttft = summary["window"]["ttft_s"]
    assert f"{ttft['p90'] * 1e3:,.1f}" in page  # ms, as the CLI prints


def test_budget_line_names_where_the_budget_came_from() -> None:
    terms = {
        "model": "M",
        "gpu": "G",
        "tensor_parallel_size": 2,
        "num_gpu_blocks": 1000,
        "block_size": 16,
        "bytes_per_block": 2 * 1024**2,
        "max_model_len": 4096,
        "max_concurrency": 3.9,
        "num_gpu_blocks_override": None,
        "total_memory_bytes": 80 * 1024**3,
        "gpu_memory_utilization": 0.9,
        "requested_memory_bytes": 72 * 1024**3,
        "weights_bytes": 8 * 1024**3,
        "activation_peak_bytes": 1024**3,
        "non_torch_bytes": 1024**3 // 2,
        "cudagraph_bytes": 1024**3 // 2,
        "available_kv_bytes": 62 * 1024**3,
    }
    line = budget_line({}, {"kv_budget": terms, "calibration": "cal.yaml"})
    assert line.startswith("1,000 blocks x 16 tokens = 16,000 tokens per replica (2.0 GiB")
    assert "memory measured by kvsim calibrate (cal.yaml) for M on G (TP 2, per GPU)" in line
    assert "80.0 GiB x gpu_memory_utilization 0.9 = 72.0 GiB" in line
    assert "weights 8.0, activation peak 1.0" in line and "leaves 62.0 GiB" in line


SWEEP = {
    "name": "tiny",
    "base": {
        "workload": {
            "seed": 0,
            "arrival": {"type": "poisson", "rate": 4.0},
            "prompt_len": 64,
            "output_len": 32,
            "num_requests": 120,
        },
        "engine": {
            "latency_model": "constant",
            "constant_step_s": 0.004,
            "max_model_len": 512,
            "max_num_seqs": 4,
        },
    },
    "axes": [{"path": "workload.arrival.rate", "values": [4, 400]}],
    "seeds": [0],
    "length": {"max_factor": 1},
    "slo": {"ttft_p90_s": 0.2},
}


def test_sweep_ends_with_results_table_and_links_points(tmp_path: Path) -> None:
    spec = write_yaml(tmp_path / "tiny.yaml", SWEEP)
    proc = kvsim_cli("sweep", str(spec), "--out", str(tmp_path / "s"), "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    with (tmp_path / "s" / "sweep.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["verdict"] for r in rows] == ["steady", "saturated"]
    for r in rows:  # one table row per point: readable name, verdict, id
        rate = r["workload.arrival.rate"]
        line = next(x for x in out.splitlines() if f"rate={rate}, seed 0" in x)
        assert r["verdict"] in line and r["point_id"] in line
    ttft_ms = float(rows[0]["window_ttft_s_p90"]) * 1e3
    assert f"{ttft_ms:,.1f}" in out
    assert "kvsim sweep: steady up to 4 req/s; not shown steady from 400 req/s" in out
    assert "best point meeting the SLOs (TTFT p90 <= 200 ms): rate=4" in out
    page = (tmp_path / "s" / "report.html").read_text()
    links = re.findall(r"<a href='(points/[^']+)'>([^<]+)</a>", page)
    assert [name for _, name in links] == ["rate=4", "rate=400"]
    for link, _ in links:
        assert link.endswith("/report.html") and (tmp_path / "s" / link).is_file()
    assert "lines: -" not in page and "arrival rate (req/s)" in page


def test_plan_ends_with_probe_table_and_answer(tmp_path: Path) -> None:
    proc = kvsim_cli(
        "plan",
        "--question",
        "max_rate",
        "--workload",
        "chat",
        "--ttft-p90-s",
        "0.5",
        "--num-requests",
        "100",
        "--seeds",
        "1",
        "--low",
        "2",
        "--high",
        "64",
        "--max-probes",
        "3",
        "--fixed-length",
        "--out",
        str(tmp_path / "p"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert "TTFT p90 (ms)" in proc.stdout
    for probe in doc["probes"]:
        (seed,) = probe["seeds"]
        if seed["metrics"]:
            assert f"{seed['metrics']['ttft_p90_s'] * 1e3:,.1f}" in proc.stdout
    answer = doc["answer"]
    shown = str(int(answer)) if float(answer).is_integer() else f"{answer:.4g}"
    assert (
        "kvsim plan: Highest arrival rate meeting the SLOs (TTFT p90 <= 500 ms): "
        f"{shown} req/s." in proc.stdout
    )
    page = (tmp_path / "p" / "report.html").read_text()
    edge = doc["bracket"]["last_pass"]
    (seed,) = next(p for p in doc["probes"] if p["value"] == edge)["seeds"]
    run_dir = Path(seed["run_dir"])
    assert (run_dir / "report.html").is_file()  # the bracket's runs get their reports
    assert f"probes/{run_dir.parent.name}/{run_dir.name}/report.html" in page
