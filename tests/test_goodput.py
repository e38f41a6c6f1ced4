"""Goodput (requests meeting per-request SLOs per second, as ``vllm bench serve
--goodput`` counts them) over the measurement window."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sim_run_helpers import column, read_csv, write_yaml

from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec, run
from sim.records.goodput import good_requests, parse_goodput


def test_parse_goodput_takes_vllm_keys_in_ms() -> None:
    assert parse_goodput(["ttft:500", "tpot:50", "e2el:3000"]) == {
        "ttft": 500.0,
        "tpot": 50.0,
        "e2el": 3000.0,
    }
    assert parse_goodput([]) is None


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("ttft", "KEY:VALUE"),
        ("itl:5", "ttft, tpot, e2el"),
        ("ttft:-1", "positive"),
        ("ttft:abc", "positive"),
        ("ttft:inf", "positive"),
    ],
)
def test_bad_goodput_items_name_the_flag_and_the_allowed_keys(item: str, says: str) -> None:
    with pytest.raises(ValueError, match="--goodput") as err:
        parse_goodput([item])
    assert says in str(err.value)


def test_a_key_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_goodput(["ttft:1", "ttft:2"])


def test_good_requests_needs_every_slo_and_lets_one_token_requests_pass_tpot() -> None:
    ttft = np.array([0.1, 0.6, 0.1, 0.1])
    tpot = np.array([0.01, 0.01, np.nan, 0.09])
    e2e = np.array([1.0, 1.0, 0.2, 1.0])
    assert good_requests({"ttft": 500, "tpot": 50}, ttft, tpot, e2e).tolist() == [
        True,
        False,
        True,
        False,
    ]
    assert good_requests({"e2el": 500}, ttft, tpot, e2e).tolist() == [False, False, True, False]


def test_window_goodput_counts_the_good_finishes_in_the_window(tmp_path: Path) -> None:
    workload = write_yaml(
        tmp_path / "w.yaml",
        {
            "name": "g",
            "seed": 3,
            "arrival": {"type": "poisson", "rate": 30.0},
            "prompt_len": {"type": "lognormal", "median": 200, "p90": 900, "max": 2048},
            "output_len": {"type": "lognormal", "median": 100, "p90": 300, "max": 1024},
            "num_requests": 1500,
        },
    )
    slo = {"ttft": 60.0, "tpot": 20.0}
    summary = run(
        RunSpec(workload=str(workload), engine=EngineConfig(), goodput=slo), tmp_path / "r"
    )
    win = summary["window"]
    _, rows = read_csv(tmp_path / "r" / "requests.csv")
    finish, arrival = column(rows, "finish_s"), column(rows, "arrival_s")
    first, tokens = column(rows, "first_token_s"), column(rows, "output_tokens")
    ttft = first - arrival
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(tokens > 1, (finish - first) / (tokens - 1), np.nan)
    good = (ttft <= 0.060) & (np.isnan(tpot) | (tpot <= 0.020))
    eps = 1e-6  # requests.csv holds 9 significant digits; the window ends at an arrival
    inside = (finish >= win["start_s"] - eps) & (finish <= win["end_s"] + eps)
    expected = float((good & inside).sum()) / win["duration_s"]
    goodput = win["goodput_rps"]
    assert goodput["value"] == pytest.approx(expected)
    assert 0 < goodput["value"] < win["throughput_rps"]["value"]  # some, not all, are good
    assert goodput["ci95"][0] < goodput["value"] < goodput["ci95"][1]
    assert goodput["slo_ms"] == slo
    in_window = (arrival >= win["start_s"] - eps) & (arrival <= win["end_s"] + eps)
    assert goodput["good_fraction"] == pytest.approx(float(good[in_window].mean()))
    config = (tmp_path / "r" / "config.yaml").read_text()
    assert "goodput_slo_ms" in config


def test_no_goodput_without_slos(tmp_path: Path) -> None:
    workload = write_yaml(
        tmp_path / "w.yaml",
        {
            "name": "g",
            "arrival": {"type": "poisson", "rate": 5.0},
            "prompt_len": 64,
            "output_len": 16,
            "num_requests": 100,
        },
    )
    summary = run(RunSpec(workload=str(workload)), tmp_path / "r")
    assert "goodput_rps" not in summary["window"]
    assert "goodput_slo_ms" not in (tmp_path / "r" / "config.yaml").read_text()


def test_kvsim_run_goodput_flag(tmp_path: Path) -> None:
    from sim_run_helpers import kvsim_cli

    bad = kvsim_cli("run", "--goodput", "itl:5", "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2
    assert "--goodput" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "bad").exists()
    workload = write_yaml(
        tmp_path / "w.yaml",
        {
            "name": "g",
            "arrival": {"type": "poisson", "rate": 5.0},
            "prompt_len": 64,
            "output_len": 16,
            "num_requests": 200,
        },
    )
    ok = kvsim_cli("run", str(workload), "--goodput", "ttft:1000", "--out", str(tmp_path / "r"))
    assert ok.returncode == 0, ok.stderr
    assert "goodput (window)" in ok.stdout
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    good = summary["window"]["goodput_rps"]
    assert good["slo_ms"] == {"ttft": 1000.0}
    assert good["good_fraction"] == 1.0  # a light load: every TTFT is far below 1 s
