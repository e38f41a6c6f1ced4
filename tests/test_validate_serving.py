"""Replaying the four public real vLLM runs: kvsim's errors stay within the bounds set
from their measurement (a change that makes step times worse fails here)."""

from __future__ import annotations

from sim.validate.serving import DATA, RUNS, validate_serving

# Median |signed error of the mean| over the four runs, default latency model, as
# measured when these bounds were set: TTFT 28.4%, TPOT 16.3%, E2E 19.6%. They were
# 18.0%, 12.4% and 14.8% before expert parallelism was modelled: the Qwen3-30B-A3B run
# (DP 2 with EP) then read every expert on each replica and came out +12% E2E, one
# error hiding another; with the experts shared it is -22%, the same sign and cause as
# the Qwen3-32B TP 2 run's -32% (the datasheet's PCIe link is about three times what
# that machine's GPUs exchange at: docs/calibration.md).
BOUNDS = {"ttft_mean": 0.29, "tpot_mean": 0.17, "e2e_mean": 0.20}


def test_every_public_run_replays_within_the_bounds() -> None:
    v = validate_serving()
    assert [r["run"] for r in v.rows] == [r.name for r in RUNS]
    medians = v.medians()
    for metric, bound in BOUNDS.items():
        assert medians[metric] <= bound, (metric, medians, v.rows)
    # The DP 2 + EP run's ranks step in lockstep, as vLLM's do (sim.dp_lockstep):
    # -16.3% TPOT and -18.2% E2E when set; with independent ranks -19.8% and -21.9%.
    moe = next(r for r in v.rows if r["run"] == "RTXPRO6000_Qwen3-30B-A3B-Instruct-2507")
    assert -0.18 < float(moe["tpot_mean"]) < 0 and -0.20 < float(moe["e2e_mean"]) < 0, moe


def test_the_data_is_in_the_checkout() -> None:
    for run in RUNS:
        assert (DATA / run.name / "requests.jsonl").is_file(), run.name


def test_a_fit_to_one_real_run_carries_to_another_model_and_tp_size() -> None:
    """Fitted to the RTX PRO 6000's Qwen3-32B run (TP 2) alone, the factors replay its
    Llama-3.1-8B run (TP 1, another model), which the fit never saw, within 6% on the E2E
    mean, 4.5% on TPOT and 11% on TTFT (measured when set: -5.3%, -3.7%, -9.8%). Before
    the custom all-reduce kernel's latency had a factor of its own this pair came out
    within 2%, through one latency for every collective, fitted at nine times NCCL's, which
    the DP + EP run refuted (+31% E2E)."""
    from calibrate.trace_fit.cli import measured_requests
    from calibrate.trace_fit.fit import errors, fit_trace
    from calibrate.trace_fit.replay import replay
    from sim.run import RunSpec

    runs = {r.name: r for r in RUNS}

    def spec(name: str) -> RunSpec:
        r = runs[name]
        log = DATA / name / "requests.jsonl"
        return RunSpec(workload=str(log), model=r.model, gpu=r.gpu, engine=r.engine)

    fit_on, held_out = "RTXPRO6000_Qwen3-32B", "RTXPRO6000_Llama-3.1-8B"
    fit = fit_trace([(spec(fit_on), measured_requests(str(DATA / fit_on)))])
    err = errors(
        measured_requests(str(DATA / held_out)).frame(),
        replay(spec(held_out), fit.efficiency).requests,
    )
    assert abs(err["e2e_mean"]) < 0.06 and abs(err["tpot_mean"]) < 0.045, err
    assert abs(err["ttft_mean"]) < 0.11, err
