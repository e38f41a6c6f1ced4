"""Fitting the roofline's efficiency factors to measured request times."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from calibrate.catalog import load_gpu, load_model
from calibrate.roofline import RooflineEfficiency, RooflineLatencyModel
from calibrate.roofline_terms import RooflineTerms, efficiency_of, theta_of
from calibrate.trace_fit.cli import measured_requests
from calibrate.trace_fit.fit import Measured, fit_trace
from calibrate.trace_fit.replay import replay
from calibrate.trace_fit.solve import busy_terms, data_shares, solve
from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "tests" / "data" / "llmservingsim" / "RTXPRO6000_Llama-3.1-8B"
PRO6000 = "RTX-PRO-6000"
ENGINE = {"max_num_seqs": 128, "max_num_batched_tokens": 2048, "gpu_memory_utilization": 0.9}


@pytest.mark.parametrize("model", ["Llama-3.1-8B", "Gemma-3-27B", "DeepSeek-V3"])
@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("gpu", ["H100-SXM", "L40S"])
def test_terms_dot_theta_is_the_roofline(model: str, tp: int, gpu: str) -> None:
    eff = RooflineEfficiency(memory=0.6, attention=0.4, step_overhead_s=1e-3)
    check_terms(RooflineLatencyModel(load_model(model), load_gpu(gpu), tp, eff), eff, tp)


@pytest.mark.parametrize("tp", [1, 2])
def test_terms_dot_theta_is_the_roofline_with_dp(tp: int) -> None:
    """An MoE model whose experts span a DP group of 4 (dispatch and combine terms)."""
    eff = RooflineEfficiency(memory=0.6, interconnect=0.3, custom_allreduce_scale=3.0)
    gpu = load_gpu("H100-SXM")
    rf = RooflineLatencyModel(load_model("DeepSeek-V3"), gpu, tp, eff, data_parallel_size=4)
    check_terms(rf, eff, tp)


def check_terms(rf: RooflineLatencyModel, eff: RooflineEfficiency, seed: int) -> None:
    """``terms . theta`` equals the roofline's step and decode times on random steps."""
    terms, theta = RooflineTerms(rf), theta_of(eff)
    rng = np.random.default_rng(seed)
    for _ in range(40):
        n = int(rng.integers(1, 40))
        new = rng.choice([0, 1, 1, 1, int(rng.integers(2, 3000))], size=n)
        ctx = rng.integers(0, 50_000, size=n)
        want = rf.step_time(new, ctx)
        assert terms.step(new, ctx) @ theta == pytest.approx(want, rel=1e-12, abs=1e-15)
    b = rng.integers(0, 300, size=64)
    k = b * rng.integers(0, 5000, size=64)
    np.testing.assert_allclose(terms.decode(b, k) @ theta, rf.decode_step_times(b, k), rtol=1e-12)


def test_theta_round_trips() -> None:
    eff = RooflineEfficiency(0.5, 0.6, 0.2, 0.3, 1e-5, 2e-5, 3e-4, 4e-6)
    assert efficiency_of(theta_of(eff)) == pytest.approx(eff)


def test_busy_terms_counts_the_started_fraction() -> None:
    starts, durations = np.array([0.0, 1.0, 5.0]), np.array([1.0, 2.0, 1.0])
    terms = np.array([[1.0], [10.0], [100.0]])
    got = busy_terms(starts, durations, terms, np.array([-1.0, 0.5, 2.0, 4.0, 5.5, 9.0]))
    np.testing.assert_allclose(got[:, 0], [0.0, 0.5, 6.0, 11.0, 61.0, 111.0])


def test_solve_recovers_identified_and_keeps_unidentified_at_prior() -> None:
    rng = np.random.default_rng(0)
    rows = np.hstack([rng.uniform(0.1, 1.0, (200, 2)), np.zeros((200, 1))])
    truth = np.array([2.0, 3.0, 7.0])
    measured = rows @ truth
    prior = np.array([1.5, 1.5, 5.0])
    got = solve(rows, measured, np.zeros(200), prior, np.array([1.0, 0.0, 0.0]), 1e-4)
    np.testing.assert_allclose(got[:2], truth[:2], rtol=1e-3)
    assert got[2] == pytest.approx(5.0)  # no data: the prior
    bounded = solve(rows, measured * 0.1, np.zeros(200), prior, np.array([1.0, 1.0, 0.0]), 1e-4)
    assert bounded[:2].min() >= 1.0 - 1e-12  # an efficiency is at most 1


def test_data_shares_say_what_the_rows_decide_and_what_the_prior_does() -> None:
    """An independent term the rows hold: decided by them; a term no row holds: the
    prior's; two terms of the same shape in every row: the rows fix only their sum, and
    the one held more loosely takes it (its prior gives way)."""
    rng = np.random.default_rng(1)
    x = rng.uniform(0.1, 1.0, (400, 2))
    rows = np.hstack([x, x[:, 1:2], np.zeros((400, 1))])  # column 2 is column 1 again
    measured = rows @ np.array([2.0, 3.0, 3.0, 1.0]) + 0.1
    prior = np.ones(4)
    weight = np.array([0.001, 0.001, 0.01, 0.001])
    share = data_shares(rows, measured, prior, weight)
    assert share[0] > 0.99 and share[3] == pytest.approx(0.0)
    assert share[1] > 0.95 and share[2] < 0.05  # the firmer twin is left to its prior
    alone = data_shares(rows[:, [0, 2, 3]], measured, prior[:3], weight[[0, 2, 3]])
    assert alone[1] > 0.9  # without its loose twin the same term, as firmly held, is decided


def _spec(trace: Path) -> RunSpec:
    return RunSpec(
        workload=str(trace), model="Llama-3.1-8B", gpu=PRO6000, engine=EngineConfig(**ENGINE)
    )


def test_fit_recovers_factors_of_a_simulated_run() -> None:
    """Measured times made by a replay at known factors: the fit, started from the
    defaults, finds factors that reproduce them."""
    spec = _spec(RUN / "requests.jsonl")
    truth = RooflineEfficiency(memory=0.5, compute=0.6, step_overhead_s=1e-3)
    req = replay(spec, truth).requests
    measured = Measured(
        list(req["request_id"]),
        req["arrival_s"].to_numpy(),
        req["first_token_s"].to_numpy(),
        req["finish_s"].to_numpy(),
        req["output_tokens"].to_numpy(),
    )
    fit = fit_trace([(spec, measured)], prior_weight=0.01)  # a weak pull on every factor
    assert abs(fit.prior_errors[0]["e2e_mean"]) > 0.1
    for key in ("ttft_mean", "tpot_mean", "e2e_mean"):
        assert abs(fit.errors[0][key]) < 0.02, (key, fit.errors[0])
    assert fit.efficiency.memory == pytest.approx(0.5, rel=0.05)
    # the default holds memory efficiency firmly (it is fitted on operator timings):
    # the times are still reproduced, memory moves part of the way
    firm = fit_trace([(spec, measured)])
    assert abs(firm.errors[0]["e2e_mean"]) < 0.03
    assert 0.5 < firm.efficiency.memory < 0.75


def test_fit_on_a_real_run_reproduces_it() -> None:
    spec = _spec(RUN / "requests.jsonl")
    fit = fit_trace([(spec, measured_requests(str(RUN)))])
    before, after = fit.prior_errors[0], fit.errors[0]
    assert abs(after["e2e_mean"]) < 0.03 and abs(after["tpot_mean"]) < 0.03
    assert after["mean_sq_rel"] < before["mean_sq_rel"]


def _kvsim(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env_path = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "sim.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin", "HOME": str(cwd)},
    )


def test_cli_fits_writes_and_applies_to_another_model(tmp_path: Path) -> None:
    out = tmp_path / "eff.yaml"
    flags = ["--max-num-seqs", "128", "--max-num-batched-tokens", "2048"]
    res = _kvsim(
        "calibrate", "--from-trace", str(RUN), "--gpu", PRO6000, "--model", "Llama-3.1-8B",
        "--gpu-memory-utilization", "0.9", *flags, "--out", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    cal = yaml.safe_load(out.read_text())
    assert cal["kind"] == "kvsim-efficiency" and cal["gpu"]["name"] == "RTX-PRO-6000"
    run = cal["fitted_on"][0]
    assert run["model"] == "Llama-3.1-8B" and run["num_requests"] == 300
    assert abs(run["errors"]["fitted"]["e2e_mean"]) < abs(run["errors"]["prior"]["e2e_mean"])
    # a one-GPU run: what it decides is said, the collectives it never ran are the prior's
    assert set(cal["data_share"]) == set(cal["efficiency"])
    assert cal["data_share"]["custom_allreduce_scale"] == pytest.approx(0.0, abs=1e-9)
    assert cal["data_share"]["compute"] > 0.3
    assert "set by the prior, not by these runs:" in res.stdout
    assert "custom_allreduce_scale" in res.stdout.split("set by the prior")[1]
    # another model and TP size on the same GPU
    res = _kvsim(
        "run", "chat", "--num-requests", "20", "--model", "Qwen2.5-7B",
        "--tensor-parallel-size", "2", "--calibration", str(out), "--out",
        str(tmp_path / "run"), cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["latency_model"]["memory"] == pytest.approx(cal["efficiency"]["memory"])
    # another GPU: refused, naming the file's
    res = _kvsim(
        "run", "chat", "--num-requests", "5", "--gpu", "H100-SXM", "--calibration", str(out),
        "--out", str(tmp_path / "run2"), cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 2 and "RTX-PRO-6000" in res.stderr
    assert "Traceback" not in res.stderr


def test_cli_keeps_a_file_it_did_not_write(tmp_path: Path) -> None:
    mine = tmp_path / "notes.yaml"
    mine.write_text("my: notes\n")
    res = _kvsim(
        "calibrate", "--from-trace", str(RUN), "--gpu", PRO6000, "--out", str(mine), cwd=tmp_path
    )
    assert res.returncode == 2 and "--force" in res.stderr
    assert mine.read_text() == "my: notes\n"


def test_runs_file_errors_name_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "runs.yaml"
    bad.write_text(yaml.safe_dump({"runs": [{"trace": "x.jsonl", "modle": "Llama-3.1-8B"}]}))
    res = _kvsim("calibrate", "--from-trace", str(bad), "--gpu", PRO6000, cwd=tmp_path)
    assert res.returncode == 2
    assert str(bad) in res.stderr and "runs.0" in res.stderr and "Traceback" not in res.stderr


def test_runs_file_fits_two_runs(tmp_path: Path) -> None:
    runs = tmp_path / "runs.yaml"
    head = tmp_path / "head.jsonl"  # the run's first 60 requests: enough to fit, quick
    head.write_text("".join((RUN / "requests.jsonl").read_text().splitlines(True)[:60]))
    entry = {"trace": head.name, "model": "Llama-3.1-8B", "engine": ENGINE}
    runs.write_text(yaml.safe_dump({"runs": [entry, entry]}))
    out = tmp_path / "eff.yaml"
    res = _kvsim(
        "calibrate", "--from-trace", str(runs), "--gpu", PRO6000, "--out", str(out), cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert len(yaml.safe_load(out.read_text())["fitted_on"]) == 2


def test_a_vllm_bench_detailed_result_is_fitted_client_side(tmp_path: Path) -> None:
    """A detailed vllm bench serve result (client-side times) made from a replay at known
    factors plus the API server's default costs: the fit finds factors reproducing it."""
    from calibrate.frontend import FrontendModel

    truth = RooflineEfficiency(memory=0.5, compute=0.6)
    req = replay(_spec(RUN / "requests.jsonl"), truth).requests.sort_values("arrival_s")
    delay = FrontendModel().delay_s(req["prompt_tokens"].to_numpy())
    ttft = req["first_token_s"].to_numpy() - req["arrival_s"].to_numpy() + delay
    latency = req["finish_s"].to_numpy() - req["arrival_s"].to_numpy() + delay
    result = {
        "completed": len(req), "duration": float(req["finish_s"].max()),
        "start_times": (1000.0 + req["arrival_s"]).tolist(), "ttfts": ttft.tolist(),
        "latencies": latency.tolist(), "input_lens": req["prompt_tokens"].tolist(),
        "output_lens": req["output_tokens"].tolist(), "errors": [""] * len(req),
    }  # fmt: skip
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(result))
    out = tmp_path / "eff.yaml"
    res = _kvsim(
        "calibrate", "--from-trace", str(bench), "--gpu", PRO6000, "--model", "Llama-3.1-8B",
        "--max-num-seqs", "128", "--max-num-batched-tokens", "2048",
        "--gpu-memory-utilization", "0.9", "--out", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    cal = yaml.safe_load(out.read_text())
    fitted = cal["fitted_on"][0]["errors"]["fitted"]
    assert abs(fitted["e2e_mean"]) < 0.03 and abs(fitted["tpot_mean"]) < 0.03
    assert cal["efficiency"]["memory"] < RooflineEfficiency().memory  # moved towards 0.5
    assert cal["fitted_on"][0]["trace"] == str(bench)


def test_a_result_without_per_request_times_is_refused(tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"completed": 3, "duration": 1.0, "latencies": [1, 1, 1]}))
    res = _kvsim("calibrate", "--from-trace", str(bench), "--gpu", PRO6000, cwd=tmp_path)
    assert res.returncode == 2 and "--save-detailed" in res.stderr


def test_every_run_weighs_alike_whatever_its_length() -> None:
    from calibrate.trace_fit.fit import run_weights

    w = run_weights([600, 150, 50])
    parts = np.split(w**2, [600, 750])
    assert [p.sum() for p in parts] == pytest.approx([800 / 3] * 3)


def test_a_lockstep_group_is_one_line_of_forwards_timed_by_its_slowest_rank() -> None:
    """Two DP ranks: rank 0 steps at 0 and 3, rank 1 at 0 and 5; the forward at 0 ran
    both (3 s, rank 1's own step the longer), so its terms are rank 1's."""
    from calibrate.trace_fit.replay import _group_line

    rank0 = (np.array([0.0, 3.0]), np.array([3.0, 1.0]), np.array([2.0, 1.0]), np.eye(2)[[0, 0]])
    rank1 = (np.array([0.0, 5.0]), np.array([3.0, 2.0]), np.array([3.0, 2.0]), np.eye(2)[[1, 1]])
    line = _group_line([rank0, rank1])
    np.testing.assert_array_equal(line.starts, [0.0, 3.0, 5.0])
    np.testing.assert_array_equal(line.durations, [3.0, 1.0, 2.0])  # the forward at 0: 3 s
    np.testing.assert_array_equal(line.terms, [[0, 1], [1, 0], [0, 1]])
    own = _group_line([rank0[:2] + (np.array([3.0, 1.0]), rank0[3])])
    np.testing.assert_array_equal(own.durations, [3.0, 1.0])


def test_fit_recovers_factors_of_a_simulated_dp_ep_run(tmp_path: Path) -> None:
    """A MoE model served by two DP ranks with expert parallelism, stepping in lockstep:
    request times made by a replay at known factors (the first 80 requests of the public
    run's trace) are reproduced by the fit started from the defaults."""
    moe = REPO / "scripts" / "ground_truth" / "Qwen3-30B-A3B-Instruct-2507.json"
    log = REPO / "tests" / "data" / "llmservingsim" / "RTXPRO6000_Qwen3-30B-A3B-Instruct-2507"
    trace = tmp_path / "requests.jsonl"
    trace.write_text("".join((log / "requests.jsonl").read_text().splitlines(True)[:80]))
    engine = EngineConfig(**ENGINE, data_parallel_size=2, enable_expert_parallel=True)
    spec = RunSpec(
        workload=str(trace), model=str(moe), gpu=PRO6000, engine=engine,
        num_replicas=2, router="least_outstanding",
    )  # fmt: skip
    truth = RooflineEfficiency(memory=0.55, interconnect=0.3, step_overhead_s=1e-3)
    rep = replay(spec, truth)
    assert len(rep.lines) == 1 and rep.line_of_replica == [0, 0]  # one DP group
    req = rep.requests
    assert set(req["replica"]) == {0, 1}
    measured = Measured(
        list(req["request_id"]), req["arrival_s"].to_numpy(), req["first_token_s"].to_numpy(),
        req["finish_s"].to_numpy(), req["output_tokens"].to_numpy(),
    )  # fmt: skip
    fit = fit_trace([(spec, measured)], prior_weight=0.01)
    assert abs(fit.prior_errors[0]["e2e_mean"]) > 0.1
    for key in ("tpot_mean", "e2e_mean"):
        assert abs(fit.errors[0][key]) < 0.03, (key, fit.errors[0])
