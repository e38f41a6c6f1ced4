"""Probe run lengths chosen by precision (``sim.plan.length``), and ``kvsim plan``
against queueing theory.

The M/D/1 setup of ``tests/test_window.py`` (constant steps of ``s``, one request at a
time, ``L`` output tokens: service ``D = L s``) has mean TTFT
``Wq + s = rho D / (2 (1 - rho)) + s``; for a TTFT-mean SLO ``T`` the highest rate is
``rho* / D`` with ``rho* = 2 (T - s) / (D + 2 (T - s))``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_run_helpers import write_yaml

from sim.plan.judge import drift_failures, judge_summary
from sim.plan.length import confirm_factor, decided_fail, needs_longer
from sim.plan.runner import run_plan
from sim.plan.search import Bisection
from sim.plan.spec import load_plan

STEP_S = 0.01
OUTPUT_LEN = 10
SERVICE_S = STEP_S * OUTPUT_LEN


def _judged(state: str = "steady", value: float = 0.1, ci: list[float] | None = None) -> dict:
    return {
        "state": state,
        "metrics": None if state != "steady" else {"ttft_mean_s": value},
        "intervals": None if state != "steady" else {"ttft_mean_s": ci},
    }


def test_a_run_is_lengthened_only_while_it_cannot_decide() -> None:
    bounds = {"ttft_mean_s": 0.1}
    assert needs_longer(_judged(ci=None), bounds, 0.05) == ["ttft_mean_s interval"]
    # The interval holds the bound and is wider than 5%: longer.
    assert needs_longer(_judged(value=0.1, ci=[0.09, 0.11]), bounds, 0.05)
    # ... narrower than 5%: decided on the value.
    assert needs_longer(_judged(value=0.1, ci=[0.097, 0.103]), bounds, 0.05) == []
    # Wholly on one side of the bound: decided, however wide.
    assert needs_longer(_judged(value=0.05, ci=[0.03, 0.07]), bounds, 0.05) == []
    assert needs_longer(_judged(value=0.2, ci=[0.15, 0.25]), bounds, 0.05) == []
    assert decided_fail(_judged(value=0.2, ci=[0.15, 0.25]), bounds)
    assert needs_longer(_judged("undecided"), bounds, 0.05) == ["verdict undecided"]
    assert needs_longer(_judged("saturated"), bounds, 0.05) == []


def _md1_plan(tmp_path: Path, slo: float, num_requests: int = 1000, **length: object) -> dict:
    workload = write_yaml(
        tmp_path / "md1.yaml",
        {
            "name": "md1",
            "arrival": {"type": "poisson", "rate": 1.0},
            "prompt_len": 32,
            "output_len": OUTPUT_LEN,
            "num_requests": num_requests,
        },
    )
    plan = load_plan(
        None,
        {
            "question": "max_rate",
            "workload": str(workload),
            "slo.ttft_mean_s": slo,
            "engine.latency_model": "constant",
            "engine.constant_step_s": STEP_S,
            "engine.max_num_seqs": 1,
            "search.low": 2.0,
            "search.high": 9.5,
            "search.rel_tol": 0.015,
            **{f"length.{k}": v for k, v in length.items()},
        },
    )
    return run_plan(plan, tmp_path / "plan", "test")


def test_plan_finds_the_md1_rate_for_a_ttft_mean_slo(tmp_path: Path) -> None:
    slo = 0.11
    wait = slo - STEP_S
    analytic = 2 * wait / (SERVICE_S + 2 * wait) / SERVICE_S  # 6.67 req/s
    doc = _md1_plan(tmp_path, slo, precision=0.04)
    assert doc["answer"] == pytest.approx(analytic, rel=0.03), doc["answer"]
    # Probes near the answer ran longer than the start; far ones did not.
    factors = {
        p["value"]: max(s["length"]["factors"][-1] for s in p["seeds"]) for p in doc["probes"]
    }
    assert factors[2.0] == 1
    assert max(factors.values()) > 1
    saved = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert saved["simulated"]["num_requests"] >= 1000 * len(doc["probes"]) * 2


def test_fixed_length_runs_once_and_says_when_too_short(tmp_path: Path) -> None:
    doc = _md1_plan(tmp_path, 0.11, num_requests=300, fixed=True)
    lengths = {tuple(s["length"]["factors"]) for p in doc["probes"] for s in p["seeds"]}
    assert lengths == {(1,)}
    notes = [s["length_note"] for p in doc["probes"] for s in p["seeds"] if s["length_note"]]
    assert notes and all(n.startswith("undecided at the fixed length") for n in notes)


def test_confirm_factor_doubles_until_the_window_spans_enough_sojourns() -> None:
    assert confirm_factor(60.0, 2, 50.0, 16) == 2  # already long enough
    assert confirm_factor(10.0, 1, 50.0, 16) == 8  # 10 -> 80 sojourns at 8x
    assert confirm_factor(10.0, 4, 50.0, 16) == 16  # capped at max_factor
    assert confirm_factor(None, 1, 50.0, 16) == 16  # no measure: the longest run
    assert confirm_factor(1.0, 16, 50.0, 16) == 16


def test_a_confirmation_that_fails_after_the_budget_still_narrows_to_the_tolerance() -> None:
    threshold = {"value": 38.0}

    def probe(x: float) -> bool:
        return x <= threshold["value"]

    search = Bisection(probe, "max", False, True, rel_tol=0.05, max_probes=12)
    first = search.run(0.5, None)  # 8 doublings and 4 bisections: the whole budget
    assert first.num_probes == 12 and first.status == "bracketed"
    threshold["value"] = 33.0  # the answer fails its confirmation, as does all above 33
    passed = [v for v in (0.5, 1, 2, 4, 8, 16, 32) if probe(v)]
    again = search.resume_below(first.answer, passed)
    assert again.status == "bracketed", again
    assert (again.first_fail - again.answer) <= 0.05 * again.first_fail
    assert 32.0 <= again.answer <= 33.0 < again.first_fail
    assert search.bisections_needed(32.0, 38.05) == 2


def test_a_failed_confirmation_resumes_the_search_below_the_answer() -> None:
    threshold = {"value": 10.0}

    def probe(x: float) -> bool:
        return x <= threshold["value"]

    search = Bisection(probe, "max", False, True, rel_tol=0.02, max_probes=40)
    first = search.run(1.0, None)
    assert 9.8 <= first.answer <= 10.0
    threshold["value"] = 7.0  # the long run says: the answer fails, so does 8..10
    passed = [v for v in (1.0, 2.0, 4.0, 8.0, first.answer) if v != first.answer]
    again = search.resume_below(first.answer, [v for v in passed if probe(v)])
    assert again.status == "bracketed" and 6.86 <= again.answer <= 7.0
    assert again.first_fail > 7.0
    none_below = search.resume_below(1.0, [2.0, 4.0])
    assert none_below.status == "infeasible" and none_below.answer is None


def _undecided_summary(t: float) -> dict:
    dist = {"mean": 0.05, "p50": 0.05, "p90": 0.05, "p99": 0.05, "ci95": None}
    window = {
        "ttft_s": dist,
        "tpot_s": dist,
        "e2e_s": dist,
        "preemptions_per_request": 0.0,
        "duration_s": 100.0,
        "in_system_trend": {"rising": t > 2.3, "t": t, "growth_frac": 0.3},
        "warnings": [],
    }
    return {
        "verdict": {"state": "undecided", "reasons": ["rising"]},
        "window": window,
        "throughput_rps": 1.0,
    }


@pytest.mark.parametrize(
    ("t", "value", "passes_at_limit"),
    [(3.0, 0.05, True), (0.0, 0.05, True), (6.0, 0.05, False), (3.0, 0.097, False)],
)
def test_at_the_length_limit_an_undecided_seed_must_clear_its_bounds_by_a_margin(
    t: float, value: float, passes_at_limit: bool
) -> None:
    # Before the limit an undecided seed fails (the plan runs it longer); at the limit
    # a clear rise fails it, an unclear one passes only with every SLO 5% clear of
    # its bound (0.097 is within the bound 0.1, not within 95% of it).
    bounds = {"ttft_p90_s": 0.1}
    summary = _undecided_summary(t)
    summary["window"]["ttft_s"] = {**summary["window"]["ttft_s"], "p90": value}
    assert not judge_summary(summary, bounds)["passed"]
    judged = judge_summary(summary, bounds, drift_margin=0.05)
    assert judged["passed"] is passes_at_limit
    assert judged["drifting"] is (t < 4.6)
    if not passes_at_limit and t < 4.6:
        assert "drifting" in judged["failures"][0]


def test_a_drifting_seed_is_held_to_its_interval_upper_end() -> None:
    bounds = {"tpot_p99_s": 0.05}
    values = {"tpot_p99_s": 0.0462}
    assert drift_failures(values, {"tpot_p99_s": [0.0438, 0.0487]}, bounds, 0.05)
    assert not drift_failures(values, {"tpot_p99_s": [0.0438, 0.0470]}, bounds, 0.05)
    assert drift_failures(values, {"tpot_p99_s": None}, bounds, 0.1)  # 46.2 > 45


def test_the_answer_is_confirmed_by_longer_runs(tmp_path: Path) -> None:
    # 1,000 requests span a few hundred mean sojourns; asking for 1,000 makes the
    # answer's seeds run again at twice the length (max_factor 2).
    doc = _md1_plan(tmp_path, 0.11, precision=0.5, max_factor=2, confirm_sojourns=1000)
    answer = next(p for p in doc["probes"] if p["value"] == doc["answer"])
    assert answer["confirmed"]
    assert all(s["length"]["factors"][-1] == 2 for s in answer["seeds"])
    assert all(s["sojourns"] > 0 for s in answer["seeds"])
    others = [p for p in doc["probes"] if p["value"] != doc["answer"]]
    assert not any(p["confirmed"] for p in others)
