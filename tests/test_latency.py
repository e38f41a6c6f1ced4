"""Latency models: the roofline's monotonicity and scaling, the decode fast path equal to
step_time, the constant model, and the factory's errors."""

from __future__ import annotations

import numpy as np
import pytest

from calibrate.catalog import load_gpu, load_model
from calibrate.latency import (
    ConstantLatencyModel,
    RooflineEfficiency,
    RooflineLatencyModel,
    make_latency_model,
)


@pytest.fixture(scope="module")
def h100():
    return load_gpu("H100-SXM")


@pytest.fixture(scope="module")
def llama8b(h100):
    return make_latency_model("roofline", model=load_model("Llama-3.1-8B"), gpu=h100)


def decode(lm, batch, ctx):
    return lm.step_time(np.ones(batch, dtype=np.int64), np.full(batch, ctx))


def test_llama8b_h100_decode_is_plausible(llama8b):
    # Weights 16.06 GB at 0.75 x 3.35 TB/s = 6.4 ms; KV read at batch 32: 32 x 1025 tokens
    # x 128 KiB = 4.3 GB -> 1.7 ms; plus 0.4 ms step and 0.3 ms attention-kernel floors.
    # Published H100 numbers for this model: about 6-7 ms per token alone, 8-15 ms at 32.
    assert 6e-3 < decode(llama8b, 1, 1024) < 8e-3
    assert 7e-3 < decode(llama8b, 32, 1024) < 15e-3


def test_more_tokens_take_longer(llama8b):
    prefill = [llama8b.step_time([n], [0]) for n in (16, 256, 1024, 4096, 8192)]
    assert all(a <= b for a, b in zip(prefill, prefill[1:]))
    assert prefill[-1] > 10 * prefill[0]
    batches = [decode(llama8b, b, 512) for b in (1, 8, 64, 256)]
    assert all(a < b for a, b in zip(batches, batches[1:]))


def test_decode_time_grows_with_context(llama8b):
    times = [decode(llama8b, 64, c) for c in (0, 1024, 8192, 65536)]
    assert all(a < b for a, b in zip(times, times[1:]))


def test_prefill_attention_grows_with_cached_context(llama8b):
    assert llama8b.step_time([512], [16384]) > llama8b.step_time([512], [0])


def test_tensor_parallel_speeds_up_big_models(h100):
    m = load_model("Llama-3.1-70B")
    t = {tp: decode(RooflineLatencyModel(m, h100, tp), 32, 1024) for tp in (1, 2, 4, 8)}
    assert t[1] > t[2] > t[4] > t[8]
    assert t[2] < 0.7 * t[1]  # halving weights per GPU beats the all-reduce cost
    pre = {tp: RooflineLatencyModel(m, h100, tp).step_time([4096], [0]) for tp in (1, 2)}
    assert pre[2] < 0.6 * pre[1]


def test_allreduce_term_only_with_tp(h100):
    m = load_model("Llama-3.1-8B")
    slow_link = RooflineEfficiency(interconnect=0.01)
    one = RooflineLatencyModel(m, h100, 1, slow_link).step_time([2048], [0])
    assert one == RooflineLatencyModel(m, h100, 1).step_time([2048], [0])
    two = RooflineLatencyModel(m, h100, 2, slow_link).step_time([2048], [0])
    assert two > RooflineLatencyModel(m, h100, 2).step_time([2048], [0])


@pytest.mark.parametrize("name", ["Llama-3.1-8B", "Qwen2.5-7B", "DeepSeek-V3", "Gemma-3-27B"])
@pytest.mark.parametrize("tp", [1, 8])
def test_decode_step_times_equal_step_time(name, tp, h100):
    lm = RooflineLatencyModel(load_model(name), h100, tp)
    rng = np.random.default_rng(0)
    batches, totals, windowed, singles = [], [], [], []
    for batch in (1, 3, 17, 64, 200):
        ctx = rng.integers(0, 5000, size=batch)
        singles.append(lm.step_time(np.ones(batch), ctx))
        batches.append(batch)
        totals.append(int(ctx.sum()))
        windowed.append(float(np.minimum(ctx + 1, 1024).sum()))
    window = {1024: np.array(windowed)}
    fast = lm.decode_step_times(np.array(batches), np.array(totals), window)
    np.testing.assert_allclose(fast, singles, rtol=1e-12)


def test_decode_step_times_without_window_sums_bound_sliding_layers(h100):
    lm = RooflineLatencyModel(load_model("Gemma-3-27B"), h100)
    short = np.full(8, 100)  # every context inside the 1024 window: the bound is exact
    exact = lm.step_time(np.ones(8), short)
    assert lm.decode_step_times(np.array([8]), np.array([800]))[0] == pytest.approx(exact)
    long = np.full(8, 5000)
    assert lm.decode_step_times(np.array([8]), np.array([40000]))[0] == pytest.approx(
        lm.step_time(np.ones(8), long)
    )


def test_sliding_window_caps_attention_cost(h100):
    gemma = load_model("Gemma-3-27B")
    all_full = gemma.model_copy(update={"layer_types": ("full",) * gemma.num_layers})
    lm, full = RooflineLatencyModel(gemma, h100), RooflineLatencyModel(all_full, h100)
    assert decode(lm, 64, 500) == pytest.approx(decode(full, 64, 500))  # inside the window
    # Past the window only the 10 global layers (of 62) keep growing.
    growth = decode(lm, 64, 60000) - decode(lm, 64, 2000)
    assert 0 < growth < 0.2 * (decode(full, 64, 60000) - decode(full, 64, 2000))


def test_moe_reads_more_experts_with_more_tokens(h100):
    lm = RooflineLatencyModel(load_model("DeepSeek-V3"), load_gpu("H200"), 8)
    assert decode(lm, 1, 1000) < decode(lm, 16, 1000) < decode(lm, 256, 1000)


def test_empty_and_mismatched_inputs(llama8b):
    assert llama8b.step_time([], []) == 0.0
    assert llama8b.step_time([0, 0], [5, 6]) == 0.0
    assert llama8b.decode_step_times(np.array([0]), np.array([0]))[0] == 0.0
    with pytest.raises(ValueError, match="one entry per request"):
        llama8b.step_time([1, 1], [5])
    with pytest.raises(ValueError, match=">= 0"):
        llama8b.step_time([-1], [5])


def test_constant_model():
    lm = make_latency_model("constant", step_s=0.02)
    assert isinstance(lm, ConstantLatencyModel)
    assert lm.step_time([5, 1], [0, 10]) == 0.02 and lm.step_time([], []) == 0.0
    np.testing.assert_array_equal(
        lm.decode_step_times(np.array([3, 0]), np.array([9, 0])), [0.02, 0.0]
    )
    with pytest.raises(ValueError, match="step_s"):
        ConstantLatencyModel(0)


def test_factory_errors(h100):
    with pytest.raises(ValueError, match="needs a model and a gpu"):
        make_latency_model("roofline", gpu=h100)
    with pytest.raises(ValueError, match="step_s"):
        make_latency_model("constant")
    with pytest.raises(ValueError, match="cannot read"):
        make_latency_model("fitted", calibration="cal.yaml")
    with pytest.raises(ValueError, match="allowed: roofline, constant, fitted"):
        make_latency_model("magic")
    with pytest.raises(ValueError, match="efficiency compute"):
        RooflineEfficiency(compute=1.5)


def test_describe_records_parameters(llama8b):
    info = llama8b.describe()
    assert info["kind"] == "roofline" and info["gpu"] == "H100-SXM"
    assert info["compute"] == RooflineEfficiency().compute


@pytest.mark.parametrize("name,tp", [("Llama-3.1-8B", 1), ("Llama-3.1-70B", 4), ("Qwen2.5-7B", 1)])
def test_scalar_step_timers_agree_with_the_model(name, tp, h100):
    """The engine's numpy-free step timers: the decode timer bit for bit, the mixed-step
    timer to 1e-12, on batches it was not built from; None where no twin exists."""
    import random

    from sim.engine.step_timing import make_decode_timer, make_step_timer

    lm = RooflineLatencyModel(load_model(name), h100, tensor_parallel_size=tp)
    step, dec = make_step_timer(lm), make_decode_timer(lm)
    assert step is not None and dec is not None
    rng = random.Random(42)
    for _ in range(300):
        n = rng.randint(1, 300)
        new = [rng.choice((1, 1, rng.randint(2, 8192))) for _ in range(n)]
        ctx = [rng.randint(0, 200_000) for _ in range(n)]
        ref = lm.step_time(np.array(new), np.array(ctx))
        assert step(new, ctx) == pytest.approx(ref, rel=1e-12)
        b, k = rng.randint(1, 1024), rng.randint(0, 10**7)
        assert dec(b, k) == float(lm.decode_step_times(np.array([b]), np.array([k]))[0])
    assert make_step_timer(RooflineLatencyModel(load_model("Gemma-3-27B"), h100)) is None
    assert make_step_timer(ConstantLatencyModel(0.01))([0, 3], [5, 5]) == 0.01


@pytest.mark.parametrize("name,tp", [("Llama-3.1-8B", 1), ("Llama-3.1-70B", 4)])
def test_stretch_timers_sum_decode_steps(name, tp, h100):
    """A stretch's durations are the decode timer's (or the model's) step by step, its
    starts the running sums, and it stops at the first step starting at ``until``."""
    import random

    from sim.engine.step_timing import make_decode_timer, make_stretch_timer

    lm = RooflineLatencyModel(load_model(name), h100, tensor_parallel_size=tp)
    dec = make_decode_timer(lm)
    rng = random.Random(7)
    for stretch in (make_stretch_timer(lm, dec), make_stretch_timer(lm, None)):
        for _ in range(50):
            b, c, t = rng.randint(1, 300), rng.randint(0, 10**6), rng.random() * 100
            until = t + rng.choice((0.0, 0.05, 0.5, 1e9))
            starts, durs, end = stretch(t, until, b, c, 64)
            ref_t, ctx = t, c
            for s0, d in zip(starts, durs):
                assert s0 == ref_t < until
                assert d == dec(b, ctx)
                ref_t, ctx = ref_t + d, ctx + b
            assert end == ref_t
            assert len(starts) == 64 or end >= until
