"""``kvsim plan`` min_replicas with ``pd``: the fewest prefill + decode instances.

The walk (:mod:`sim.plan.pd_search`) against monotone frontiers drawn at random: it
finds the true fewest instances, the fewest prefill instances among the splits that
tie, probes no split twice, and every split with one instance fewer fails. Then a
small plan end to end (constant step times), its plan.json, report and errors.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim.cli import app
from sim.plan.describe import describe
from sim.plan.pd_search import OutOfProbes, seed_split_answers, walk_splits
from sim.plan.runner import run_plan
from sim.plan.spec import PlanError, load_plan

INF = math.inf


@st.composite
def frontiers(draw):
    """``(max P, max D, need)``: ``need[P]`` the fewest decode instances that pass with
    ``P`` prefill instances (non-increasing in ``P``; inf: none)."""
    pmax = draw(st.integers(1, 6))
    dmax = draw(st.integers(1, 12))
    need, last = [], INF
    for _ in range(pmax):
        if draw(st.booleans()):
            last = min(last, draw(st.integers(1, dmax + 2)))
        need.append(last)
    return pmax, dmax, need


def _truth(pmax, dmax, need):
    splits = [(p, d) for p in range(1, pmax + 1) for d in range(1, dmax + 1) if d >= need[p - 1]]
    if not splits:
        return None
    return min(splits, key=lambda s: (s[0] + s[1], s[0]))


@settings(max_examples=300, deadline=None)
@given(frontiers())
def test_the_walk_finds_the_fewest_instances(frontier):
    pmax, dmax, need = frontier
    asked = []

    def passes(p, d):
        assert 1 <= p <= pmax and 1 <= d <= dmax
        asked.append((p, d))
        return d >= need[p - 1]

    result = walk_splits(passes, pmax, dmax)
    truth = _truth(pmax, dmax, need)
    assert len(asked) == len(set(asked)), "a split was probed twice"
    if truth is None:
        assert result.status == "infeasible" and result.best is None and len(asked) == 1
        return
    assert result.status == "bracketed"
    assert result.best == truth
    # every split with one instance fewer fails, as the bracket says
    below = sum(truth) - 1
    for p in range(1, pmax + 1):
        d = below - p
        if 1 <= d <= dmax:
            assert d < need[p - 1]
    improvements = sum(1 for f in result.frontier if f["decode"] is not None)
    assert len(asked) <= 1 + pmax + improvements * math.ceil(math.log2(dmax + 1))


def test_the_walk_by_hand():
    # prefill-bound below 2 instances, then 5 decode, then 3: the answer is 3 + 3
    need = {1: INF, 2: 5, 3: 3, 4: 3}
    asked = []

    def passes(p, d):
        asked.append((p, d))
        return d >= need[p]

    result = walk_splits(passes, 4, 8)
    assert result.best == (3, 3) and result.total == 6
    assert asked == [(4, 8), (1, 8), (2, 8), (2, 4), (2, 6), (2, 5), (3, 3), (3, 1), (3, 2), (4, 1)]
    assert result.frontier == [
        {"prefill": 1, "decode": None, "decode_at_most": 8},
        {"prefill": 2, "decode": 5, "decode_at_most": 8},
        {"prefill": 3, "decode": 3, "decode_at_most": 3},
        {"prefill": 4, "decode": None, "decode_at_most": 1},
    ]


def test_out_of_probes_keeps_the_best_so_far():
    budget = iter(range(3))

    def passes(p, d):
        if next(budget, None) is None:
            raise OutOfProbes((p, d))
        return d >= 2

    result = walk_splits(passes, 3, 6)
    assert result.status == "max_probes" and result.best is not None
    assert sum(result.best) <= 9


def test_each_seed_replays_the_walk_on_its_own_verdicts():
    # seed 0 fails (1, 1); seed 1 passes it: its walk needs no split not probed
    verdicts = {(2, 2): [True, True], (1, 2): [True, True], (1, 1): [False, True]}
    assert seed_split_answers(verdicts, [0, 1], 2, 2) == {0: 3, 1: 2}
    # a seed whose walk would need an unprobed split has no answer of its own
    verdicts = {(2, 2): [True, True], (1, 2): [False, True]}
    assert seed_split_answers(verdicts, [0, 1], 2, 2) == {0: None, 1: None}


BASE = {
    "workload": "chat",
    "question": "min_replicas",
    "slo.ttft_p90_s": 0.5,
    "engine.async_scheduling": False,
    "engine.latency_model": "constant",
    "engine.constant_step_s": 0.01,
    "engine.max_num_seqs": 4,
    "num_requests": 60,
    "seeds": [0],
    "length.max_factor": 2,
    "length.confirm_sojourns": 0,
}


def test_a_small_pd_plan_end_to_end(tmp_path):
    plan = load_plan(None, {**BASE, "rate": 2.0, "pd": "prefill=2,decode=4"})
    doc = run_plan(plan, tmp_path / "plan")
    assert doc["status"] == "bracketed"
    split = doc["split"]
    assert doc["answer"] == split["prefill"] + split["decode"]
    assert doc["limits"] == {"prefill": 2, "decode": 4}
    by_split = {(p["split"]["prefill"], p["split"]["decode"]): p for p in doc["probes"]}
    assert by_split[(split["prefill"], split["decode"])]["passed"]
    # the bracket: every split of one instance fewer failed or lies below a failure
    below = doc["bracket"]["first_fail"]
    assert below == doc["answer"] - 1
    for p in range(1, 3):
        d = below - p
        if 1 <= d <= 4:
            assert any(k[0] == p and k[1] >= d and not v["passed"] for k, v in by_split.items())
    on_disk = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert on_disk["split"] == split and on_disk["frontier"] == doc["frontier"]
    for p in doc["probes"]:
        name = f"prefill={p['split']['prefill']},decode={p['split']['decode']}"
        assert Path(p["dir"]).name == name
        run_dir = Path(p["seeds"][0]["run_dir"])
        config = (run_dir / "config.yaml").read_text()
        assert f"prefill_instances: {p['split']['prefill']}" in config
        assert f"decode_instances: {p['split']['decode']}" in config
    page = (tmp_path / "plan" / "report.html").read_text()
    assert "Split map" in page and f"{split['prefill']} prefill + {split['decode']} decode" in page
    assert (tmp_path / "plan" / "plots" / "plan_split_map.png").is_file()
    text = describe(doc)
    assert text.startswith(
        f"min_replicas: {split['prefill']} prefill + {split['decode']} decode = "
        f"{doc['answer']} instances"
    )


@pytest.mark.parametrize(
    "bad, words",
    [
        ({"question": "min_kv", "rate": 2.0}, "not min_kv"),
        ({"rate": 2.0, "search.high": 8.0}, "leave search.low and search.high out"),
        ({"rate": 2.0, "num_replicas": 2}, "sizes its pools with pd"),
        ({}, "min_replicas needs the target rate"),
    ],
)
def test_bad_pd_plans_name_the_field(bad, words):
    with pytest.raises(PlanError, match=words):
        load_plan(None, {**BASE, "pd": "prefill=1,decode=2", **bad})


def test_no_split_within_the_limits_exits_2(tmp_path):
    args = [
        "plan",
        "--workload",
        "chat",
        "--question",
        "min_replicas",
        "--rate",
        "6",
        "--pd",
        "prefill=1,decode=1",
        "--ttft-p90-s",
        "0.5",
        "--no-async-scheduling",
        "--latency-model",
        "constant",
        "--constant-step-s",
        "0.01",
        "--max-num-seqs",
        "4",
        "--num-requests",
        "60",
        "--seeds",
        "1",
        "--out",
        str(tmp_path / "plan"),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "at prefill=1,decode=1 (the easiest probe)" in result.output
    assert json.loads((tmp_path / "plan" / "plan.json").read_text())["status"] == "infeasible"
