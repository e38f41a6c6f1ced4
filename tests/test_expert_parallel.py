"""Data and expert parallelism with an MoE model, and the TP collectives beside the
all-reduces: what each adds to a step (calibrate.roofline), to the weights on a GPU
(calibrate.budget), and how the engine flags reach them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from calibrate.allreduce import NCCL_LATENCY_2_S
from calibrate.budget import compute_kv_budget
from calibrate.catalog import load_gpu, load_model
from calibrate.roofline import RooflineEfficiency, RooflineLatencyModel
from sim.app.engine_config import EngineConfig
from sim.cli import app

MOE, DENSE = load_model("DeepSeek-V3"), load_model("Llama-3.1-8B")
H100 = load_gpu("H100-SXM")


def test_a_dense_models_dp_ranks_are_independent_engines() -> None:
    one = RooflineLatencyModel(DENSE, H100, 1)
    dp = RooflineLatencyModel(DENSE, H100, 1, data_parallel_size=4)
    b, k = np.array([1, 64, 256]), np.array([500, 64_000, 400_000])
    assert np.array_equal(one.decode_step_times(b, k), dp.decode_step_times(b, k))
    assert dp.dispatch is None and dp.describe() == one.describe()


def test_moe_experts_span_the_dp_group_and_each_layer_pays_its_dispatch() -> None:
    one = RooflineLatencyModel(MOE, H100, 8)
    dp = RooflineLatencyModel(MOE, H100, 8, data_parallel_size=2)
    assert dp.expert_bytes == pytest.approx(one.expert_bytes / 2)
    # the DP group's tokens route to this rank's shards: twice the tokens' experts
    n = np.array([1.0, 8.0, 64.0])
    assert np.allclose(dp._distinct_experts(n), one._distinct_experts(2 * n))
    latency, link = dp.dispatch_parts(np.array([100.0]))
    assert latency[0] == pytest.approx(2 * dp.dispatch.nccl_latency / NCCL_LATENCY_2_S)
    group_bytes = 2 * 100 * (2 * MOE.hidden_size + MOE.num_experts) * 2  # bf16
    assert link[0] == pytest.approx(group_bytes * dp.dispatch.ring / 2)
    assert dp.describe()["data_parallel_size"] == 2
    # a large decode batch reads every expert either way: DP halves those bytes
    b, k = np.array([256]), np.array([256 * 2000])
    assert dp.decode_step_times(b, k)[0] < one.decode_step_times(b, k)[0]


def test_the_logits_all_gather_costs_one_nccl_call_per_step() -> None:
    eff = RooflineEfficiency(allreduce_latency_s=0.0, custom_allreduce_scale=0.0)
    tp2 = RooflineLatencyModel(DENSE, H100, 2, eff)
    latency, link = tp2.logits_gather_parts(np.array([10.0]))
    assert latency[0] == pytest.approx(tp2.allreduce.nccl_latency / NCCL_LATENCY_2_S)
    assert link[0] == pytest.approx(10 * DENSE.vocab_size * 2 * tp2.allreduce.ring / 2)
    # with the latencies off, a step pays the gathered bytes' seconds per request
    base = tp2.step_time(np.array([1]), np.array([100]))
    more = tp2.step_time(np.array([1, 1]), np.array([100, 100]))
    gather = tp2.logits_gather_parts(np.array([1.0]))[1][0] / eff.interconnect
    assert more - base > gather


def test_the_custom_kernels_latency_has_its_own_factor() -> None:
    """Small all-reduces (the custom kernel) scale with ``custom_allreduce_scale``,
    not with NCCL's latency: doubling it adds one custom latency per call."""
    base = RooflineLatencyModel(DENSE, H100, 2)
    twice = RooflineLatencyModel(DENSE, H100, 2, RooflineEfficiency(custom_allreduce_scale=2.0))
    calls = 2 * DENSE.num_layers
    b, k = np.array([8]), np.array([8000])
    added = twice.decode_step_times(b, k)[0] - base.decode_step_times(b, k)[0]
    assert added == pytest.approx(calls * base.allreduce.custom_latency, rel=1e-9)
    nccl = RooflineLatencyModel(DENSE, H100, 2, RooflineEfficiency(allreduce_latency_s=72e-6))
    added = nccl.decode_step_times(b, k)[0] - base.decode_step_times(b, k)[0]
    assert added == pytest.approx(base.allreduce.nccl_latency, rel=1e-9)  # the gather only


def test_the_budget_splits_moe_experts_over_the_dp_group() -> None:
    gpu = load_gpu("H200")
    one = compute_kv_budget(MOE, gpu, 8, max_model_len=8192)
    dp = compute_kv_budget(MOE, gpu, 8, max_model_len=8192, data_parallel_size=2)
    routed = MOE.routed_expert_bytes()
    assert one.weights_bytes - dp.weights_bytes == routed // 8 - routed // 16
    assert dp.num_gpu_blocks > one.num_gpu_blocks
    dense = compute_kv_budget(DENSE, gpu, 1, data_parallel_size=4)
    assert dense.weights_bytes == compute_kv_budget(DENSE, gpu, 1).weights_bytes


def test_engine_dumps_leave_the_new_fields_out_at_their_defaults() -> None:
    assert "data_parallel_size" not in EngineConfig().model_dump()
    assert "enable_expert_parallel" not in EngineConfig().model_dump()
    dumped = EngineConfig(data_parallel_size=2, enable_expert_parallel=True).model_dump()
    assert dumped["data_parallel_size"] == 2 and dumped["enable_expert_parallel"] is True


def test_replicas_must_be_a_multiple_of_the_dp_size(tmp_path) -> None:
    out = tmp_path / "run"
    res = CliRunner().invoke(
        app,
        ["run", "chat", "--data-parallel-size", "2", "--num-replicas", "3",
         "--num-requests", "5", "--out", str(out)],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "--data-parallel-size 2" in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_a_dp_moe_run_defaults_to_one_replica_per_dp_rank(tmp_path) -> None:
    out = tmp_path / "run"
    res = CliRunner().invoke(
        app,
        ["run", "chat", "--model", "DeepSeek-V3", "--gpu", "H200",
         "--tensor-parallel-size", "8", "--data-parallel-size", "2",
         "--enable-expert-parallel", "--num-requests", "20", "--no-report", "--out", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_replicas"] == 2


def test_a_plan_with_dp_names_the_replica_count() -> None:
    from sim.plan.spec import PlanError, load_plan

    engine = {"data_parallel_size": 2}
    slo = {"ttft_p90_s": 1.0}
    with pytest.raises(PlanError, match="num_replicas: must be a multiple"):
        load_plan(None, {"question": "max_rate", "engine": engine, "slo": slo})
    with pytest.raises(PlanError, match="min_replicas searches one replica"):
        load_plan(None, {"question": "min_replicas", "rate": 5, "engine": engine, "slo": slo})
    spec = {"question": "max_rate", "engine": engine, "slo": slo, "num_replicas": 4}
    assert load_plan(None, spec).num_replicas == 4
