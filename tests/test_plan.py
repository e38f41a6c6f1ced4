"""``kvsim plan``: the answer on the chat preset is bracketed by probes that pass and
fail as claimed (re-checked from the kept run directories' measurement windows);
saturated probes are reported as saturated; each probe seed's 95% intervals are kept;
the engine flags of ``kvsim run`` reach every probe; ``min_kv`` tells the
configuration bound (max_model_len) from the workload's need; the max_probes note is
shown only for a bracket wider than the tolerance; bad specs and impossible SLOs exit
2 with one message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from sim_run_helpers import kvsim_cli, write_yaml

from sim.plan import PlanError, load_plan, run_plan
from sim.plan.describe import describe
from sim.plan.judge import judge_summary
from sim.plan.search import Bisection
from sim.records.verdict import judge_run_dir

SLO = {"ttft_p90_s": 1.0, "tpot_p99_s": 0.05}


def _meets(run_dir: Path) -> bool:
    """The plan's verdict re-checked from a kept run: the measurement window's figures."""
    window = json.loads((run_dir / "summary.json").read_text())["window"]
    ok = (
        window["ttft_s"]["p90"] <= SLO["ttft_p90_s"]
        and window["tpot_s"]["p99"] <= SLO["tpot_p99_s"]
    )
    return ok and judge_run_dir(run_dir)["state"] == "steady"


def test_max_rate_on_chat_is_bracketed_by_its_probes(tmp_path: Path) -> None:
    plan = load_plan(
        None,
        {
            "workload": "chat",
            "question": "max_rate",
            "engine.max_num_seqs": 16,
            "num_requests": 100,
            "seeds": [0, 1],
            "slo.ttft_p90_s": SLO["ttft_p90_s"],
            "slo.tpot_p99_s": SLO["tpot_p99_s"],
            "search.low": 2.0,
            "search.high": 24.0,
            "search.rel_tol": 0.15,
            "search.max_probes": 7,
            "length.max_factor": 4,  # runs of 100 to 400 requests keep the test short
        },
    )
    doc = run_plan(plan, tmp_path / "plan")
    assert doc["status"] == "bracketed"
    last_pass, first_fail = doc["bracket"]["last_pass"], doc["bracket"]["first_fail"]
    assert doc["answer"] == last_pass < first_fail
    ci = doc["confidence_interval"]
    assert ci["low"] <= last_pass <= ci["high"]
    probes = {p["value"]: p for p in doc["probes"]}
    for seed in probes[last_pass]["seeds"]:
        assert _meets(Path(seed["run_dir"]))
    assert not all(_meets(Path(s["run_dir"])) for s in probes[first_fail]["seeds"])
    # Far above capacity: reported as saturated, with no latency presented.
    top = probes[24.0]["seeds"]
    assert all(s["state"] == "saturated" and s["metrics"] is None for s in top)
    saved = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert saved["answer"] == doc["answer"]
    assert (tmp_path / "plan" / "report.html").read_text().count("data:image/png") == 1
    # `kvsim report` re-renders a plan directory from plan.json alone.
    from sim.sweep.cli import report_command

    (tmp_path / "plan" / "report.html").unlink()
    assert report_command(str(tmp_path / "plan")) == 0
    assert (tmp_path / "plan" / "report.html").read_text().count("data:image/png") == 1


def test_bisection_finds_the_boundary() -> None:
    seen = []

    def below(x: float) -> bool:
        seen.append(x)
        return x <= 7.3

    result = Bisection(below, "max", False, True, 0.02, 20).run(1.0, None)
    assert result.status == "bracketed"
    assert result.last_pass <= 7.3 < result.first_fail <= result.last_pass * 1.02 + 1e-9
    fewest = Bisection(lambda n: n >= 5, "min", True, False, 0.05, 20).run(1.0, None)
    assert (fewest.answer, fewest.first_fail) == (5.0, 4.0)
    none = Bisection(lambda n: False, "max", False, True, 0.05, 20).run(1.0, 8.0)
    assert none.status == "infeasible" and none.answer is None


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ({"question": "max_rate", "slo": {"ttft_p90_s": 1, "p50": 2}}, "slo.p50: unknown key"),
        ({"question": "max_rate", "slo": {"ttft_p90_s": -1}}, "slo.ttft_p90_s"),
        ({"question": "min_replicas", "slo": {"ttft_p90_s": 1}}, "rate: min_replicas needs"),
        ({"question": "max_rate", "slo": {}}, "slo: give at least one"),
        ({"question": "max_rate", "router": "x", "slo": {"e2e_p99_s": 1}}, "unknown router"),
    ],
)
def test_malformed_plan_specs(tmp_path: Path, plan: dict, message: str) -> None:
    path = write_yaml(tmp_path / "plan.yaml", plan)
    with pytest.raises(ValueError, match=message) as err:
        load_plan(str(path), {})
    assert str(path) in str(err.value)


def test_cli_bad_spec_and_impossible_slo_exit_2(tmp_path: Path) -> None:
    bad = write_yaml(tmp_path / "bad.yaml", {"question": "max_rat", "slo": {"ttft_p90_s": 1}})
    proc = kvsim_cli("plan", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.count("error") == 1 and "question" in proc.stderr
    assert "Traceback" not in proc.stderr
    impossible = write_yaml(
        tmp_path / "impossible.yaml",
        {
            "question": "max_rate",
            "num_requests": 30,
            "seeds": [0],
            "slo": {"ttft_p90_s": 1e-6},
            "search": {"low": 1.0, "high": 4.0},
        },
    )
    proc = kvsim_cli("plan", str(impossible), "--out", str(tmp_path / "p"))
    assert proc.returncode == 2, proc.stderr
    assert "no rate searched meets the SLOs" in proc.stderr and "ttft_p90_s" in proc.stderr
    doc = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert doc["status"] == "infeasible" and doc["answer"] is None


ENGINE_FLAGS = {
    "--max-model-len": ("max_model_len", 4096),
    "--max-num-batched-tokens": ("max_num_batched_tokens", 8192),
    "--gpu-memory-utilization": ("gpu_memory_utilization", 0.8),
    "--block-size": ("block_size", 32),
    "--tensor-parallel-size": ("tensor_parallel_size", 2),
    "--scheduling-policy": ("scheduling_policy", "priority"),
    "--long-prefill-token-threshold": ("long_prefill_token_threshold", 512),
    "--kv-cache-dtype": ("kv_cache_dtype", "fp8"),
    "--latency-model": ("latency_model", "constant"),
    "--constant-step-s": ("constant_step_s", 0.004),
    "--max-num-seqs": ("max_num_seqs", 32),
}


def test_plan_takes_the_engine_flags_of_run(tmp_path: Path) -> None:
    flags = [str(x) for flag, (_, value) in ENGINE_FLAGS.items() for x in (flag, value)]
    flags += ["--no-enable-prefix-caching", "--no-enable-chunked-prefill"]
    out = tmp_path / "p"
    proc = kvsim_cli(
        "plan", "--question", "max_rate", "--num-requests", "30", "--seeds", "1",
        "--ttft-p90-s", "100", "--low", "1", "--high", "2", "--out", str(out), *flags,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    want = {name: value for name, value in ENGINE_FLAGS.values()}
    want.update(enable_prefix_caching=False, enable_chunked_prefill=False)
    engine = json.loads((out / "plan.json").read_text())["plan"]["engine"]
    assert {k: engine[k] for k in want} == want
    for config in out.glob("probes/*/seed_0/config.yaml"):  # what each probe ran
        ran = yaml.safe_load(config.read_text())["engine"]
        assert {k: ran[k] for k in want} == want
    assert len(list(out.glob("probes/*/seed_0/config.yaml"))) == 2
    for flag, value, problem in [
        ("--kv-cache-dtype", "fp4", "engine.kv_cache_dtype: Input should be 'auto' or 'fp8'"),
        ("--block-size", "20", "engine.block_size: must be a multiple of 16"),
        ("--scheduling-policy", "lifo", "engine.scheduling_policy: Input should be 'fcfs'"),
    ]:
        proc = kvsim_cli("plan", "--question", "max_rate", "--ttft-p90-s", "1", flag, value)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kvsim: error: plan flags: "), lines
        assert problem in lines[0]


def _summary(whole_p90: float, window: dict | None) -> dict:
    dist = {"mean": 0.1, "p50": 0.1, "p90": whole_p90, "p99": whole_p90}
    summary = {
        "verdict": {"state": "steady", "reasons": []},
        "ttft_s": dist,
        "tpot_s": dist,
        "e2e_s": dist,
        "preemptions_per_request": 0.0,
        "throughput_rps": 1.0,
    }
    if window is not None:
        summary["window"] = window
    return summary


def test_probes_are_judged_on_the_window_figures() -> None:
    ci = {"mean": [0.09, 0.11], "p50": None, "p90": [0.4, 0.6], "p99": None}
    dist = {"mean": 0.1, "p50": 0.1, "p90": 0.5, "p99": 0.7, "ci95": ci}
    window = {
        "ttft_s": dist,
        "tpot_s": dist,
        "e2e_s": dist,
        "preemptions_per_request": 0.0,
        "warnings": ["window too short for a p99 interval"],
    }
    bounds = {"ttft_p90_s": 1.0, "e2e_p99_s": 1.0}
    # The whole run (warm-up and drain included) misses the SLO; its window meets it.
    judged = judge_summary(_summary(5.0, window), bounds)
    assert judged["passed"] and judged["figures"] == "window"
    assert judged["metrics"]["ttft_p90_s"] == 0.5 and judged["metrics"]["e2e_p99_s"] == 0.7
    assert judged["intervals"] == {"ttft_p90_s": [0.4, 0.6], "e2e_p99_s": None}
    assert judged["window_warnings"] == window["warnings"]
    # An older summary without a window: the whole-run figures, no intervals.
    old = judge_summary(_summary(5.0, None), bounds)
    assert not old["passed"] and old["figures"] == "whole_run"
    assert old["failures"] == ["ttft_p90_s 5 > 1", "e2e_p99_s 5 > 1"]
    assert old["intervals"] == {"ttft_p90_s": None, "e2e_p99_s": None}


def test_probe_intervals_are_kept_and_shown(tmp_path: Path) -> None:
    plan = load_plan(
        None,
        {
            "workload": "chat",
            "question": "max_rate",
            "num_requests": 800,
            "seeds": [0],
            "slo.ttft_p90_s": 5.0,
            "engine.latency_model": "constant",
            "engine.constant_step_s": 0.002,
            "search.low": 1.0,
            "search.high": 2.0,
        },
    )
    doc = run_plan(plan, tmp_path / "plan")
    shown = 0
    for probe in doc["probes"]:
        (seed,) = probe["seeds"]
        window = json.loads((Path(seed["run_dir"]) / "summary.json").read_text())["window"]
        assert seed["metrics"]["ttft_p90_s"] == window["ttft_s"]["p90"]
        ci = window["ttft_s"]["ci95"]["p90"]
        assert seed["intervals"] == {"ttft_p90_s": ci}
        if ci is not None:
            shown += 1
            text = f"ttft_p90_s {window['ttft_s']['p90']:.4g} [{ci[0]:.4g}, {ci[1]:.4g}]"
            assert text in describe(doc)
            p90, lo, hi = (1e3 * v for v in (window["ttft_s"]["p90"], *ci))
            in_ms = f"{p90:,.1f} [{lo:,.1f}, {hi:,.1f}]"  # the report shows ms
            assert in_ms in (tmp_path / "plan" / "report.html").read_text()
    assert shown, "800 requests give a p90 interval"


def _min_kv(tmp_path: Path, name: str, **extra: object) -> dict:
    plan = load_plan(
        None,
        {
            "workload": "chat",
            "question": "min_kv",
            "rate": 8.0,
            "num_requests": 600,
            "seeds": [0],
            "slo.ttft_p90_s": 2.0,
            "search.max_probes": 3,
            **extra,
        },
    )
    return run_plan(plan, tmp_path / name)


def test_min_kv_tells_the_configuration_bound_from_the_workloads_need(tmp_path: Path) -> None:
    # Llama-3.1-8B's 131,072-token context needs 8,192 blocks of 16 tokens, plus the
    # null block, before the engine starts: far more than chat needs at 8 req/s.
    full = _min_kv(tmp_path, "full")
    assert full["bound"] == "configuration" and full["status"] == "at_bound"
    assert full["configuration_min"] == 8193 and full["blocks_per_request"] == 8192
    assert full["answer"] == 8193 and full["max_model_len"] == 131072
    assert min(p["value"] for p in full["probes"]) == 8193  # the search starts there
    text = describe(full)
    assert "the answer is the configuration bound: max_model_len 131072 needs 8193 blocks" in text
    assert "--max-model-len" in text and "beyond it" not in text
    # With a context the workload fits in, the workload's own need is the answer.
    short = _min_kv(tmp_path, "short", **{"engine.max_model_len": 8192, "search.high": 4096})
    assert short["bound"] == "workload" and short["configuration_min"] == 513
    assert short["answer"] < 8193
    lowest = min(short["probes"], key=lambda p: p["value"])
    assert lowest["value"] == 513 and not lowest["passed"]
    (seed,) = lowest["seeds"]
    assert seed["state"] != "failed" and "max_model_len" not in " ".join(seed["failures"])
    assert "the answer is the workload's need" in describe(short)
    saved = json.loads((tmp_path / "short" / "plan.json").read_text())
    assert (saved["bound"], saved["configuration_min"]) == ("workload", 513)
    # A search limit the engine cannot start at is bad input, before any probe runs.
    plan = load_plan(
        None,
        {"question": "min_kv", "rate": 1.0, "slo.ttft_p90_s": 1.0, "search.high": 4096},
    )
    with pytest.raises(PlanError, match="search.high: the engine does not start at"):
        run_plan(plan, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def _doc(status: str, last_pass: float, first_fail: float) -> dict:
    return {
        "question": "min_kv",
        "param": "num_gpu_blocks",
        "unit": "blocks",
        "status": status,
        "answer": last_pass,
        "bracket": {"last_pass": last_pass, "first_fail": first_fail},
        "confidence_interval": None,
        "num_probes": 12,
        "plan": {"search": {"rel_tol": 0.05}},
        "slo": {"ttft_p90_s": 1.0},
        "probes": [],
    }


def test_max_probes_note_only_for_a_bracket_wider_than_the_tolerance() -> None:
    note = "stopped at search.max_probes"
    # An integer search stops once the bracket meets rel_tol (it used to bisect to
    # adjacent values, running out of probes with a bracket 0.3% wide).
    blocks = Bisection(lambda n: n >= 8200, "min", True, False, 0.05, 12).run(16.0, 27729.0)
    assert blocks.status == "bracketed"
    assert blocks.first_fail < 8200 <= blocks.last_pass <= blocks.first_fail * 1.05 + 1
    narrow = Bisection(lambda n: n >= 8200, "min", True, False, 0.001, 6).run(16.0, 27729.0)
    assert narrow.status == "max_probes"
    assert narrow.last_pass - narrow.first_fail > 0.001 * narrow.last_pass
    assert note not in describe(_doc("max_probes", 8215, 8193))  # 0.3% wide
    assert note in describe(_doc("max_probes", 2214, 513))


def test_a_workload_with_relative_length_files_plans(tmp_path: Path) -> None:
    """Each probe writes its own copy of the workload: lengths files named relative to
    the user's YAML are still found (before, every probe failed to read them)."""
    from sim_run_helpers import kvsim_cli

    data = tmp_path / "data"
    data.mkdir()
    (data / "prompts.txt").write_text("64\n128\n256\n")
    (data / "outputs.txt").write_text("8\n16\n")
    workload = data / "w.yaml"
    workload.write_text(
        "arrival: {type: poisson, rate: 1}\n"
        "prompt_len: {type: empirical, path: prompts.txt}\n"
        "output_len: {type: empirical, path: outputs.txt}\nnum_requests: 50\n"
    )
    out = tmp_path / "plan"
    res = kvsim_cli(
        "plan", "--workload", str(workload), "--question", "max_rate", "--ttft-p90-s", "1",
        "--latency-model", "constant", "--constant-step-s", "0.01", "--max-probes", "2",
        "--seeds", "1", "--confirm-sojourns", "0", "--out", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    doc = json.loads((out / "plan.json").read_text())
    failures = [f for p in doc["probes"] for s in p["seeds"] for f in s["failures"]]
    assert not [f for f in failures if "cannot read" in f], failures
    assert any(p["passed"] for p in doc["probes"])
