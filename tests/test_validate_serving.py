"""Replaying the four public real vLLM runs: kvsim's errors stay within the bounds set
from their measurement (a change that makes step times worse fails here)."""

from __future__ import annotations

from sim.validate.serving import DATA, RUNS, validate_serving

# Bounds on each run's signed error of the mean (TTFT 10%, TPOT and E2E 5%), default
# latency model (the factors the catalog ships for the GPU: calibrate/catalog/efficiency/,
# fitted on the one-replica runs, so in-sample for three of the four runs; the
# Qwen3-30B-A3B DP 2 + EP run is held out of its GPU's fit). Measured when set
# (TTFT/TPOT/E2E): RTX 4090 +0.3/-1.5/-0.1%; RTX PRO 6000 Llama-3.1-8B -3.2/-0.2/-1.0%,
# Qwen3-32B TP 2 -1.2/-1.0/-1.1%, Qwen3-30B-A3B -4.9/+0.3/+0.2%. With the generic
# (A100-fitted) factors: +18.8/+12.7/+17.4%, -17.2/-7.2/-9.7%, -37.9/-27.4/-31.7% and
# -77.8/-16.4/-18.3%.
BOUNDS = {"ttft_mean": 0.10, "tpot_mean": 0.05, "e2e_mean": 0.05}


def test_every_public_run_replays_within_the_bounds() -> None:
    v = validate_serving()
    assert [r["run"] for r in v.rows] == [r.name for r in RUNS]
    for row in v.rows:
        for metric, bound in BOUNDS.items():
            assert abs(float(row[metric])) <= bound, (metric, row)  # type: ignore[arg-type]


def test_the_data_is_in_the_checkout() -> None:
    for run in RUNS:
        assert (DATA / run.name / "requests.jsonl").is_file(), run.name


def test_a_fit_to_one_real_run_carries_to_another_model_and_tp_size() -> None:
    """Fitted to the RTX PRO 6000's Qwen3-32B run (TP 2) alone, the factors replay its
    Llama-3.1-8B run (TP 1, another model), which the fit never saw, within 6% on the E2E
    mean, 4.5% on TPOT and 11% on TTFT (measured when set: -5.2%, -3.6%, -9.6%). The
    Qwen3-30B-A3B DP 2 + EP run fitted alone gives the same run +6.1% E2E; neither one-GPU
    run carries to the TP 2 run, whose all-reduce over PCIe they never saw
    (scripts/validate_serving.py prints each pair).

    Why not closer: the TP 2 run decides its collectives (the link, the custom
    all-reduce's latency) and leaves memory efficiency and the fixed costs per step to the
    prior. Every decode step makes the same 128 custom all-reduce calls, so their latency
    has the shape of the fixed cost per step and of the weights' read time, and being held
    loosely it takes whatever of them the run shows (docs/calibration.md: "What one run
    decides")."""
    from calibrate.trace_fit.cli import measured_requests
    from calibrate.trace_fit.fit import errors, fit_trace
    from calibrate.trace_fit.replay import replay
    from sim.app.run import RunSpec

    runs = {r.name: r for r in RUNS}

    def spec(name: str) -> RunSpec:
        r = runs[name]
        log = DATA / name / "requests.jsonl"
        return RunSpec(workload=str(log), model=r.model, gpu=r.gpu, engine=r.engine)

    fit_on, held_out = "RTXPRO6000_Qwen3-32B", "RTXPRO6000_Llama-3.1-8B"
    fit = fit_trace([(spec(fit_on), measured_requests(str(DATA / fit_on)))])
    share = fit.data_share
    assert share["interconnect"] > 0.9 and share["custom_allreduce_scale"] > 0.9, share
    for name in ("memory", "compute", "step_overhead_s"):
        assert share[name] < 0.1, share
    err = errors(
        measured_requests(str(DATA / held_out)).frame(),
        replay(spec(held_out), fit.efficiency).requests,
    )
    assert abs(err["e2e_mean"]) < 0.06 and abs(err["tpot_mean"]) < 0.045, err
    assert abs(err["ttft_mean"]) < 0.11, err
