"""Every file in examples/ runs as the docs say, so none can rot.

Each is run through the ``kvsim`` command line from the repository root, as
docs/README.md shows it, and its output checked against the file itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from sim_run_helpers import REPO, kvsim_cli, read_csv

from sim.plan.probe import fmt_value

EXAMPLES = REPO / "examples"


def test_every_example_is_covered_here():
    covered = {
        "chat-trace.jsonl",
        "workload.yaml",
        "engine.yaml",
        "plan.yaml",
        "recommend.yaml",
        "gpu-prices.yaml",
        "day.yaml",
        "bench-stages.yaml",
        "spec-decode.yaml",
        "pd.yaml",
        "plan-pd.yaml",
    }
    assert {p.name for p in EXAMPLES.iterdir()} == covered
    text = Path(__file__).read_text(encoding="utf-8")
    assert all(f"examples/{name}" in text for name in covered)


def test_trace_example_replays_every_request(tmp_path):
    out = tmp_path / "run"
    res = kvsim_cli("run", "examples/chat-trace.jsonl", "--out", str(out))
    assert res.returncode == 0, res.stderr
    lines = [json.loads(x) for x in (EXAMPLES / "chat-trace.jsonl").read_text().splitlines()]
    _, cols = read_csv(out / "requests.csv")
    assert sorted(cols["request_id"]) == sorted(r["request_id"] for r in lines)
    # requests sharing hash ids 1, 2 (a 1,024-token system prompt) hit the prefix cache
    assert json.loads((out / "summary.json").read_text())["prefix_cache_hit_rate"] > 0.2


def test_workload_and_engine_examples_run_as_written(tmp_path):
    out = tmp_path / "run"
    res = kvsim_cli(
        "run", "examples/workload.yaml", "--engine", "examples/engine.yaml", "--out", str(out)
    )
    assert res.returncode == 0, res.stderr
    config = yaml.safe_load((out / "config.yaml").read_text())
    workload = yaml.safe_load((EXAMPLES / "workload.yaml").read_text())
    engine = yaml.safe_load((EXAMPLES / "engine.yaml").read_text())
    assert config["workload"]["name"] == workload["name"]
    assert {k: config["engine"][k] for k in engine} == engine
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_finished"] == workload["num_requests"]
    assert summary["prefix_cache_hit_rate"] > 0.5  # two shared 1,200-token system prompts


def test_spec_decode_example_runs_as_written(tmp_path):
    out = tmp_path / "run"
    args = ["run", "chat", "--engine", "examples/spec-decode.yaml", "--num-requests", "30"]
    res = kvsim_cli(*args, "--no-report", "--out", str(out))
    assert res.returncode == 0, res.stderr
    engine = yaml.safe_load((EXAMPLES / "spec-decode.yaml").read_text())
    config = yaml.safe_load((out / "config.yaml").read_text())
    spec = config["engine"]["speculative_config"]
    assert {k: spec[k] for k in engine["speculative_config"]} == engine["speculative_config"]
    assert config["kv_budget"]["draft_model"] == "Llama-3.2-1B"
    block = json.loads((out / "summary.json").read_text())["spec_decode"]
    assert block["method"] == "draft_model" and block["num_accepted_tokens"] > 0


def test_pd_example_runs_as_written(tmp_path):
    out = tmp_path / "run"
    args = ["run", "rag", "--pd", "examples/pd.yaml", "--no-async-scheduling"]
    res = kvsim_cli(*args, "--num-requests", "30", "--no-report", "--out", str(out))
    assert res.returncode == 0, res.stderr
    pools = yaml.safe_load((EXAMPLES / "pd.yaml").read_text())
    pd = yaml.safe_load((out / "config.yaml").read_text())["pd"]
    assert pd["decode_pool"]["gpu"] == pools["decode"]["gpu"]
    assert pd["decode_pool"]["max_num_seqs"] == pools["decode"]["engine"]["max_num_seqs"]
    assert pd["prefill_pool"]["max_num_batched_tokens"] == 16384
    block = json.loads((out / "summary.json").read_text())["pd"]
    assert block["decode"]["replicas"] == 3 and block["transfers"]["count"] == 30


def test_bench_stages_example_runs_its_stages(tmp_path):
    """The staged, pooled example: every request finishes or is aborted, each stage
    starts after the one before it drained, and the pool's system prompts hit."""
    out = tmp_path / "run"
    res = kvsim_cli("run", "examples/bench-stages.yaml", "--out", str(out), timeout=300)
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_requests"] == 200
    assert summary["num_finished"] + summary["num_aborted"] == 200
    assert summary["prefix_cache_hit_rate"] > 0.8
    arrival: dict[str, float] = {}
    end: dict[str, float] = {}
    for name, last in (("requests.csv", "finish_s"), ("aborted.csv", "abort_s")):
        if (out / name).exists():
            _, cols = read_csv(out / name)
            for i, rid in enumerate(cols["request_id"]):
                arrival[rid], end[rid] = float(cols["arrival_s"][i]), float(cols[last][i])
    assert len(end) == 200
    assert arrival["req-40"] >= max(end[f"req-{i}"] for i in range(40))
    assert arrival["req-120"] >= max(end[f"req-{i}"] for i in range(40, 120))


def test_engine_example_with_a_preset(tmp_path):
    out = tmp_path / "run"
    res = kvsim_cli(
        "run", "chat", "--engine", "examples/engine.yaml", "--num-requests", "50",
        "--out", str(out),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert yaml.safe_load((out / "config.yaml").read_text())["engine"]["max_num_seqs"] == 128


def test_plan_example_answers(tmp_path):
    out = tmp_path / "plan"
    res = kvsim_cli("plan", "examples/plan.yaml", "--out", str(out), timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads((out / "plan.json").read_text())
    plan = yaml.safe_load((EXAMPLES / "plan.yaml").read_text())
    assert doc["question"] == plan["question"] and doc["slo"] == plan["slo"]
    assert doc["status"] == "bracketed" and doc["answer"] is not None
    assert doc["bracket"]["last_pass"] < doc["bracket"]["first_fail"]
    assert f"max_rate: rate = {fmt_value(doc['answer'])} req/s" in res.stdout


def test_recommend_example_prunes_before_simulating():
    """The bundled recommend example takes minutes (docs/recommend.md has its figures);
    here its candidates and bounds, with examples/gpu-prices.yaml's prices."""
    res = kvsim_cli("recommend", "examples/recommend.yaml", "--dry-run", timeout=120)
    assert res.returncode == 0, res.stderr
    spec = yaml.safe_load((EXAMPLES / "recommend.yaml").read_text())
    space = spec["space"]
    count = len(space["gpus"]) * len(space["tensor_parallel_size"]) * len(space["max_num_seqs"])
    tp1 = len(space["gpus"]) * len(space["max_num_seqs"])  # TP 1 does not hold 70B
    assert f"{count} candidates: {tp1} do not start, 0 miss an SLO at zero load" in res.stdout
    prices = yaml.safe_load((EXAMPLES / "gpu-prices.yaml").read_text())
    assert all(gpu in prices for gpu in space["gpus"])


def test_day_example_schedules_more_replicas_at_its_peak(tmp_path):
    """examples/day.yaml as docs/README.md runs it, as a dry run: the full run takes a
    minute or two (docs/autoscale.md has its figures; tests/test_autoscale.py runs the
    same command end to end on a smaller day)."""
    out = tmp_path / "autoscale"
    res = kvsim_cli(
        "autoscale", "examples/day.yaml", "--replica-rate", "38", "--window-s", "120",
        "--lead-s", "120", "--ttft-p90-s", "0.5", "--tpot-p99-s", "0.05", "--out", str(out),
        "--dry-run",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "peak 2 replicas" in res.stdout and not out.exists()
    spec = yaml.safe_load((EXAMPLES / "day.yaml").read_text())
    assert spec["arrival"]["type"] == "piecewise"


def test_pd_plan_example_answers_with_a_split(tmp_path):
    out = tmp_path / "plan"
    res = kvsim_cli("plan", "examples/plan-pd.yaml", "--out", str(out), timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads((out / "plan.json").read_text())
    plan = yaml.safe_load((EXAMPLES / "plan-pd.yaml").read_text())
    assert doc["question"] == "min_replicas" and doc["status"] == "bracketed"
    split, limits = doc["split"], doc["limits"]
    assert f"prefill={limits['prefill']},decode={limits['decode']}" == plan["pd"]
    assert 1 <= split["prefill"] <= limits["prefill"] and 1 <= split["decode"] <= limits["decode"]
    assert doc["answer"] == split["prefill"] + split["decode"]
    answer = next(p for p in doc["probes"] if p["split"] == split)
    assert answer["passed"] and answer["confirmed"]
    assert f"{split['prefill']} prefill + {split['decode']} decode" in res.stdout
    assert (out / "plots" / "plan_split_map.png").is_file()
