"""Replicas over time: the schedule, the scheduled router, costs, and the command."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from sim_run_helpers import kvsim_cli

from sim.autoscale.costs import billed_intervals, peak_concurrent
from sim.autoscale.schedule import Interval, build_schedule, replicas_needed
from sim.autoscale.windows import Window


def _windows(rates: list[float], width: float = 60.0) -> list[Window]:
    return [
        Window(i * width, (i + 1) * width, int(r * width), 100.0, 100.0)
        for i, r in enumerate(rates)
    ]


def test_replicas_needed_rounds_up_with_headroom_and_floor() -> None:
    w = _windows([1.0, 10.0, 20.0, 0.0])
    assert replicas_needed(w, 10.0, 0.0, 1) == [1, 1, 2, 1]
    assert replicas_needed(w, 10.0, 0.1, 1) == [1, 2, 3, 1]
    assert replicas_needed(w, 10.0, 0.0, 2) == [2, 2, 2, 2]
    with pytest.raises(ValueError, match="--replica-rate"):
        replicas_needed(w, 0.0, 0.0, 1)


def test_schedule_delays_leads_and_drains() -> None:
    w = _windows([1, 1, 1, 1, 1])
    s = build_schedule(w, [1, 2, 2, 1, 2], scale_up_delay_s=30.0)
    assert s.peak == 2
    first, second = s.replicas
    assert first.routable == (Interval(0.0, None),) and first.requested_s == (0.0,)
    # reactive: asked at the window, routable 30 s later; stops taking requests at 180 s
    assert second.requested_s == (60.0, 240.0)
    assert second.routable == (Interval(90.0, 180.0), Interval(270.0, None))
    assert s.routable_at(80.0) == [0] and s.routable_at(100.0) == [0, 1]
    # asked 30 s ahead: routable at the window itself; a scale-down delay bridges the gap
    early = build_schedule(w, [1, 2, 2, 1, 2], scale_up_delay_s=30.0, lead_s=30.0,
                           scale_down_delay_s=60.0)  # fmt: skip
    assert early.replicas[1].routable == (Interval(60.0, None),)


def test_a_replica_that_would_start_too_late_is_not_asked_for() -> None:
    s = build_schedule(_windows([1, 1, 1]), [1, 2, 1], scale_up_delay_s=90.0)
    assert s.replicas[1].routable == () and s.routable_at(100.0) == [0]


def test_billing_runs_to_the_last_finish_of_a_draining_replica() -> None:
    s = build_schedule(_windows([1, 1, 1]), [1, 2, 1], scale_up_delay_s=0.0)
    req = pd.DataFrame(
        {"replica": [0, 1, 1], "arrival_s": [1.0, 70.0, 110.0], "finish_s": [5.0, 80.0, 150.0]}
    )
    spans = billed_intervals(s, req, end_s=180.0)
    assert spans == [[(0.0, 180.0)], [(60.0, 150.0)]]
    assert peak_concurrent(spans) == 2


def _day(tmp_path: Path) -> Path:
    spec = {
        "name": "tiny-day",
        "seed": 0,
        "arrival": {"type": "piecewise", "segments": [
            {"until_s": 30, "rate": 2}, {"until_s": 60, "rate": 14}, {"rate": 2}]},
        "prompt_len": {"type": "fixed", "value": 64},
        "output_len": {"type": "fixed", "value": 16},
        "duration_s": 90,
    }  # fmt: skip
    path = tmp_path / "day.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_autoscaled_cluster_uses_fewer_gpu_hours_and_routes_by_schedule(tmp_path: Path) -> None:
    out = tmp_path / "as"
    res = kvsim_cli(
        "autoscale", str(_day(tmp_path)), "--replica-rate", "5", "--window-s", "30",
        "--scale-up-delay-s", "5", "--lead-s", "5", "--ttft-p90-s", "0.5",
        "--latency-model", "constant", "--constant-step-s", "0.01", "--out", str(out),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    doc = json.loads((out / "autoscale.json").read_text())
    assert [w["replicas"] for w in doc["schedule"]] == [1, 3, 1]
    auto, peak = doc["autoscaled"], doc["peak"]
    assert auto["gpu_hours"] < peak["gpu_hours"] and peak["peak_gpus"] == 3
    assert auto["meets_slo"] is True and auto["windows_meeting_slo"] == 3
    req = pd.read_csv(out / "autoscaled" / "requests.csv")
    extra = req[req["replica"] > 0]
    assert len(extra) and extra["arrival_s"].between(30.0, 60.0, inclusive="left").all()
    assert set(pd.read_csv(out / "peak" / "requests.csv")["replica"]) == {0, 1, 2}
    assert "GPU-hours" in res.stdout


def test_bad_input_exits_2_naming_the_problem(tmp_path: Path) -> None:
    res = kvsim_cli("autoscale", "chat", "--window-s", "0", "--replica-rate", "5",
                    "--out", str(tmp_path / "a"))  # fmt: skip
    assert res.returncode == 2 and "--window-s" in res.stderr and "Traceback" not in res.stderr
    res = kvsim_cli("autoscale", "chat", "--out", str(tmp_path / "b"))
    assert res.returncode == 2 and "--replica-rate" in res.stderr
    assert not (tmp_path / "b").exists()


def test_capacity_is_planned_when_not_given(tmp_path: Path) -> None:
    out = tmp_path / "as"
    res = kvsim_cli(
        "autoscale", str(_day(tmp_path)), "--window-s", "30", "--ttft-p90-s", "0.2",
        "--latency-model", "constant", "--constant-step-s", "0.02",
        "--plan-num-requests", "200", "--scale-up-delay-s", "5", "--out", str(out),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    doc = json.loads((out / "autoscale.json").read_text())
    plan = json.loads((out / "replica-plan" / "mix-0" / "plan.json").read_text())
    assert doc["replica_rate"] == plan["answer"] and doc["replica_rate_source"].startswith("plan")
    assert {w["replica_rate"] for w in doc["schedule"]} == {plan["answer"]}
    planned = yaml.safe_load((out / "replica-plan-workloads" / "mix-0.yaml").read_text())
    assert planned["arrival"]["type"] == "poisson"  # the YAML itself, arrivals made Poisson
    assert planned["prompt_len"] == {"type": "fixed", "value": 64}


def test_each_request_mix_gets_its_own_planned_capacity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace whose outputs get longer halfway: two mixes, a capacity plan each (on a
    workload of that mix's own lengths), and each window the capacity of its mix. The
    plan itself is stood in for (the test above runs a real one): it answers by the mean
    output length of the workload it is given."""
    import sim.plan.runner
    from sim.autoscale.runner import AutoscaleSpec, replica_capacities
    from sim.autoscale.windows import arrival_windows, draw_arrivals
    from sim.records.slo import SLO

    rows = [
        {"request_id": f"r{i}", "arrival_s": i * 0.25, "prompt_tokens": 32,
         "output_tokens": 8 if i < 120 else 64}
        for i in range(240)
    ]  # fmt: skip
    trace = tmp_path / "mixes.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    planned: list[str] = []

    def fake_plan(plan, out, source="plan", force=False, on_run=None):  # noqa: ANN001
        planned.append(plan.workload)
        return {"answer": 640.0 / _mean_output(plan.workload)}

    monkeypatch.setattr(sim.plan.runner, "run_plan", fake_plan)
    spec = AutoscaleSpec(workload=str(trace), model="Llama-3.1-8B", gpu="H100-SXM",
                         slo=SLO(ttft_p90_s=0.3), window_s=30.0)  # fmt: skip
    arrivals = draw_arrivals(str(trace), None)
    windows = arrival_windows(arrivals, 30.0)
    rates, member, docs = replica_capacities(spec, tmp_path / "as", arrivals, windows)
    assert member == [0, 1] and len(docs) == 2 and len(planned) == 2
    assert rates == [80.0, 10.0]  # 640 / 8 and 640 / 64: each mix its own
    mix1 = yaml.safe_load(Path(planned[1]).read_text())
    assert mix1["output_len"]["type"] == "empirical" and mix1["arrival"]["type"] == "poisson"
    assert set(Path(mix1["output_len"]["path"]).read_text().split()) == {"64"}


def _mean_output(workload_yaml: str) -> float:
    spec = yaml.safe_load(Path(workload_yaml).read_text())
    values = [int(v) for v in Path(spec["output_len"]["path"]).read_text().split()]
    return sum(values) / len(values)
