"""``kvsim recommend`` end to end on a tiny space, and its parts that need no
simulation: the Pareto frontier, the terminal chart, the analytic bounds, branch and
bound, the candidate space and the ``vllm serve`` line.

The simulated space is the M/D/1 setup of ``tests/test_plan_length.py`` (constant steps
of 10 ms, 10 output tokens): with ``max_num_seqs: 1`` a replica serves at most 10 req/s
(a request holds it for 10 steps), and a mean-TTFT SLO of 0.11 s caps it near
6.7 req/s, so 12 req/s needs two replicas and one alone saturates.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
from sim_run_helpers import write_yaml

from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec
from sim.app.setup import resolve_run
from sim.recommend import ascii_chart
from sim.recommend.bounds import candidate_bounds
from sim.recommend.pareto import X, Y, frontier
from sim.recommend.prepare import prepare
from sim.recommend.runner import run_recommend
from sim.recommend.sample import LengthSample
from sim.recommend.schedule import Job, branch_and_bound, nth_best
from sim.recommend.spec import load_recommend

STEP_S = 0.01
OUTPUT_LEN = 10


def _spec(tmp_path: Path, **over: object) -> Path:
    workload = write_yaml(
        tmp_path / "md1.yaml",
        {
            "name": "md1",
            "arrival": {"type": "poisson", "rate": 1.0},
            "prompt_len": 32,
            "output_len": OUTPUT_LEN,
            "num_requests": 200,
        },
    )
    data = {
        "model": "Llama-3.1-8B",
        "workload": str(workload),
        "slo": {"ttft_mean_s": 0.11},
        "target_rate": 12.0,
        "engine": {
            "latency_model": "constant",
            "constant_step_s": STEP_S,
            "max_model_len": 2048,
            "max_num_seqs": 1,
        },
        "space": {"gpus": ["A100-80GB", "H100-SXM"], "tensor_parallel_size": [1, 3]},
        "prices": {"A100-80GB": 1.5, "H100-SXM": 3.5},
        "top": 1,
        "search": {
            "num_requests": 200,
            "rel_tol": 0.1,
            "max_probes": 8,
            "length": {"max_factor": 2, "confirm_sojourns": 0},
        },
        "verify": {"num_requests": 800},
        **over,
    }
    return write_yaml(tmp_path / "rec.yaml", data)


def _run(tmp_path: Path, name: str, jobs: int = 1, **over: object) -> dict:
    path = _spec(tmp_path, **over)
    spec = load_recommend(str(path), {})
    prep = prepare(spec, str(path), path.parent)
    return run_recommend(prep, tmp_path / name, jobs=jobs)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("recommend")
    return tmp, _run(tmp, "out")


def test_recommend_ranks_checks_and_prunes(tiny: tuple[Path, dict]) -> None:
    tmp, doc = tiny
    by_key = {c["key"]: c for c in doc["candidates"]}
    # TP 3 does not divide Llama-3.1-8B's 32 heads: pruned before any simulation.
    assert by_key["A100-80GB tp3"]["status"] == "configuration"
    assert "32 attention heads" in by_key["A100-80GB tp3"]["reason"]
    # Same step times on both GPUs, so the cheaper one wins; the dearer one's bound
    # (one replica at 3.5 USD/h) cannot beat the winner's 2 x 1.5: never simulated.
    assert doc["chosen"] == "A100-80GB tp1"
    assert by_key["H100-SXM tp1"]["status"] == "pruned"
    assert doc["counts"]["simulated"] == 1
    top = by_key[doc["chosen"]]
    assert 5.0 < top["rate"] < 8.0  # the M/D/1 answer, about 6.7 req/s
    assert top["rate"] <= top["bounds"]["rate_bound"]
    assert top["replicas"] == 2 and top["cost_per_hour"] == 3.0
    # The whole cluster at the target meets the SLOs; one replica fewer does not.
    assert top["verified"] is True and top["checks"][-1]["passed"]
    assert top["checks"][-1]["replicas"] == 2
    assert top["fewer_check"]["replicas"] == 1 and not top["fewer_check"]["passed"]
    assert top["vllm_serve"].startswith("vllm serve meta-llama/Llama-3.1-8B ")
    for name in ("recommend.json", "pareto.csv", "report.html", "plots/pareto.png"):
        assert (tmp / "out" / name).is_file(), name


def test_each_frontier_point_is_a_simulated_configuration(tiny: tuple[Path, dict]) -> None:
    _, doc = tiny
    front = doc["pareto"]
    assert front
    simulated = {(p["key"], p["rate"]) for p in doc["points"]}
    assert all((p["key"], p["rate"]) in simulated for p in front)
    xs, ys = [p[X] for p in front], [p[Y] for p in front]
    assert xs == sorted(xs) and all(a > b for a, b in zip(ys, ys[1:]))
    csv_lines = (tiny[0] / "out" / "pareto.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + len(doc["points"]) + 1  # header, points, chosen
    assert csv_lines[-1].endswith(",0,1")


def test_a_rerun_reuses_every_search_and_writes_the_same_bytes(tiny: tuple[Path, dict]) -> None:
    tmp, doc = tiny
    first = (tmp / "out" / "recommend.json").read_bytes()
    again = _run(tmp, "out")  # resumed: cached searches and checks
    assert (tmp / "out" / "recommend.json").read_bytes() == first
    assert again["ranking"] == doc["ranking"]
    # A fresh directory with two processes decides the same (branch and bound decides
    # in candidate order, whatever finishes first).
    _run(tmp, "out2", jobs=2)
    assert (tmp / "out2" / "recommend.json").read_bytes() == first


# ---- no simulation below ------------------------------------------------------------


def _random_points(rng: random.Random, n: int) -> list[dict]:
    return [
        {"key": f"c{i}", "rate": float(i), X: rng.uniform(1, 500), Y: rng.uniform(1, 80)}
        for i in range(n)
    ]


def test_the_frontier_is_monotone_and_undominated() -> None:
    rng = random.Random(7)
    for _ in range(50):
        points = _random_points(rng, rng.randint(1, 40))
        front = frontier(points)
        assert front and all(p in points for p in front)
        for a, b in zip(front, front[1:]):
            assert a[X] < b[X] and a[Y] > b[Y]
        for f in front:  # nothing dominates a frontier point
            assert not any(
                p[X] >= f[X] and p[Y] >= f[Y] and (p[X] > f[X] or p[Y] > f[Y]) for p in points
            )
        for p in points:  # every other point is dominated by one on the frontier
            if p not in front:
                assert any(f[X] >= p[X] and f[Y] >= p[Y] for f in front)


def test_the_ascii_chart_fits_80_columns_and_marks_the_chosen_point() -> None:
    rng = random.Random(3)
    points = _random_points(rng, 30)
    front = frontier(points)
    chosen = {**front[0], "key": "chosen"}
    text = ascii_chart.render(points, front, chosen)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    plot = lines[1 : 1 + ascii_chart.HEIGHT]  # the grid, below its title line
    assert all(line[ascii_chart.LABEL] == "|" for line in plot)
    assert sum(line.count("*") for line in plot) == 1
    assert sum(line.count("o") for line in plot) >= 1
    assert "tokens/s/GPU" in text and "tokens/s/user" in text


def _md1_resolved(**engine: object):
    return resolve_run(
        RunSpec(
            workload="chat",
            model="Llama-3.1-8B",
            engine=EngineConfig(
                latency_model="constant", constant_step_s=STEP_S, max_model_len=4096, **engine
            ),
        )
    )


def test_bounds_of_a_constant_step_time_are_the_textbook_ones() -> None:
    lengths = LengthSample(
        prompt=np.full(100, 32), new=np.full(100, 32), output=np.full(100, OUTPUT_LEN)
    )
    resolved = _md1_resolved(max_num_seqs=4)
    b = candidate_bounds(resolved, lengths, {"ttft_mean_s": 0.5, "tpot_p99_s": 0.05}, 1.0)
    # 4 decodes per 10 ms step, 9 decodes per request: 400 / 9 req/s.
    assert b.rate_limits["decode"] == pytest.approx(4 / STEP_S / (OUTPUT_LEN - 1))
    assert b.rate_limits["tpot"] == pytest.approx(b.rate_limits["decode"])
    assert b.rate_bound == min(b.rate_limits.values())
    assert b.zero_load["ttft_mean_s"] == pytest.approx(STEP_S)  # one prefill step
    assert not b.infeasible
    slack = candidate_bounds(resolved, lengths, {"ttft_mean_s": 0.5}, 1.5)
    assert slack.rate_bound == pytest.approx(1.5 * min(slack.rate_limits.values()))
    # An SLO below one step cannot be met at any rate.
    tight = candidate_bounds(resolved, lengths, {"ttft_mean_s": STEP_S / 2}, 1.0)
    assert tight.infeasible and "zero load" in tight.infeasible[0]
    tpot = candidate_bounds(resolved, lengths, {"tpot_p99_s": STEP_S / 2}, 1.0)
    assert tpot.infeasible and tpot.rate_limits["tpot"] == 0.0


def _fake_work(payload: dict) -> dict:
    return {"rate": payload["rate"], "_key": payload["key"]}


def test_branch_and_bound_prunes_in_candidate_order_whatever_the_jobs() -> None:
    rng = random.Random(11)
    for trial in range(4):
        jobs = []
        for i in range(12):
            lower = rng.uniform(1, 10)
            actual = lower * rng.uniform(1, 3)  # a candidate scores at or above its bound
            jobs.append(Job(f"c{i:02d}", lower, {"key": f"c{i:02d}", "rate": actual}))
        jobs.sort(key=lambda j: (j.lower, j.key))
        outcomes = [
            branch_and_bound(jobs, lambda r: r["rate"], 3, _fake_work, n)
            for n in ((1, 2) if trial == 0 else (1,))
        ]
        for out in outcomes[1:]:
            assert out.results == outcomes[0].results and out.pruned == outcomes[0].pruned
        out = outcomes[0]
        # The rule, one candidate at a time.
        kept: list[float] = []
        for job in jobs:
            if job.lower > nth_best(kept, 3):
                assert job.key in out.pruned
            else:
                assert job.key in out.results
                kept.append(job.payload["rate"])
        # Pruning never loses one of the true top 3.
        best3 = sorted(j.payload["rate"] for j in jobs)[:3]
        assert sorted(r["rate"] for r in out.results.values())[:3] == best3


def test_nth_best_ignores_missing_scores() -> None:
    assert nth_best([3.0, math.inf, 1.0], 2) == 3.0
    assert nth_best([math.inf, 1.0], 2) == math.inf


def test_the_space_prunes_what_vllm_would_not_start(tmp_path: Path) -> None:
    path = _spec(
        tmp_path,
        model="Llama-3.1-70B",
        engine={"max_model_len": 8192},
        space={
            "gpus": ["A100-80GB"],
            "tensor_parallel_size": [1, 4],
            "max_num_seqs": [256],
            "max_num_batched_tokens": [128, 8192],
        },
    )
    prep = prepare(load_recommend(str(path), {}), str(path), tmp_path)
    by_key = {e["key"]: e for e in prep.entries}
    assert len(by_key) == 4
    assert "no memory left" in by_key["A100-80GB tp1 seqs=256 mbt=8192"]["reason"]
    assert "max_num_batched_tokens" in by_key["A100-80GB tp4 seqs=256 mbt=128"]["reason"]
    ok = by_key["A100-80GB tp4 seqs=256 mbt=8192"]
    assert ok["status"] == "open" and ok["search_range"]["high"] > ok["search_range"]["low"]
    assert ok["vllm_serve"] == (
        "vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 4 --max-num-seqs 256 "
        "--max-num-batched-tokens 8192 --gpu-memory-utilization 0.92 --kv-cache-dtype auto "
        "--enable-prefix-caching --max-model-len 8192"
    )
