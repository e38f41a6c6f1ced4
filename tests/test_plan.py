"""``kvsim plan``: the answer on the chat preset is bracketed by probes that pass and
fail as claimed (re-checked from the kept run directories); saturated probes are
reported as saturated; bad specs and impossible SLOs exit 2 with one message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_run_helpers import kvsim_cli, write_yaml

from sim.plan import load_plan, run_plan
from sim.plan.search import Bisection
from sim.verdict import judge_run_dir

SLO = {"ttft_p90_s": 1.0, "tpot_p99_s": 0.05}


def _meets(run_dir: Path) -> bool:
    summary = json.loads((run_dir / "summary.json").read_text())
    ok = (
        summary["ttft_s"]["p90"] <= SLO["ttft_p90_s"]
        and summary["tpot_s"]["p99"] <= SLO["tpot_p99_s"]
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
