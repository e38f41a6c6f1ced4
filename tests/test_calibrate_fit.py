"""NNLS fit of the step-time model: recovers known coefficients, reports holdout MAPE."""

from __future__ import annotations

import numpy as np
import pytest

from calibrate.catalog import load_gpu, load_model
from calibrate.fit import _lawson_hanson, fit_coefficients, fit_step_model, split_holdout
from calibrate.harness.profile_sweep import SweepGrid, plan_sweep
from calibrate.step_features import FEATURES, StepFeatures


def _synthetic(seed: int = 1):
    spec, gpu = load_model("Llama-3.1-8B"), load_gpu("H100-SXM")
    steps = plan_sweep(SweepGrid(256, 16384, 8192, 50, 6), seed)
    x = StepFeatures(spec, gpu).matrix([(s.new_tokens, s.context_tokens) for s in steps])
    beta = np.array([150e-6, 1.4, 0.8, 0.3, 1.9, 4e-6, 10e-6, 0.0])
    return x, x @ beta, beta, [s.regime for s in steps]


def test_recovers_known_coefficients_within_1_percent():
    x, y, beta, regimes = _synthetic()
    res = fit_step_model(x, y, regimes)
    used = beta > 0
    np.testing.assert_allclose(res.coefficients[used], beta[used], rtol=0.01)
    assert res.holdout_mape["all"] < 1e-6
    assert {"decode", "prefill", "mixed"} <= set(res.holdout_mape)


def test_noisy_data_still_close():
    x, y, beta, regimes = _synthetic(2)
    noisy = y * np.random.default_rng(0).lognormal(0, 0.02, y.size)
    res = fit_step_model(x, noisy, regimes)
    assert res.holdout_mape["all"] < 0.05
    assert all(c >= 0 for c in res.coefficients)


def test_own_nnls_matches_constrained_optimum():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(40, 5))
    b = a @ np.array([1.0, -2.0, 0.5, 0.0, 3.0]) + rng.normal(0, 0.01, 40)
    x = _lawson_hanson(a, b)
    assert (x >= 0).all() and x[1] == 0.0
    # KKT: gradient non-positive on zero coordinates, ~0 on positive ones
    grad = a.T @ (b - a @ x)
    assert np.all(grad[x == 0] <= 1e-8) and np.allclose(grad[x > 0], 0, atol=1e-8)


def test_zero_columns_get_zero_and_split_is_per_regime():
    x = np.column_stack([np.ones(20), np.arange(1, 21.0), np.zeros(20)])
    coef = fit_coefficients(x, 2 + 3 * np.arange(1, 21.0))
    assert coef[2] == 0 and coef[0] == pytest.approx(2) and coef[1] == pytest.approx(3)
    train, hold = split_holdout(["decode"] * 8 + ["prefill"] * 8)
    assert len(hold) == 4 and len(set(train) | set(hold)) == 16
    assert len(FEATURES) == 8
