"""Fit the step-time model: non-negative least squares over ``step_features``.

``t = sum_k beta_k * feature_k``, every ``beta_k >= 0``, fit on relative error (rows
divided by the measured time, so short and long steps weigh alike). Columns are scaled
to unit norm before solving. ``nnls`` uses ``scipy.optimize.nnls`` when scipy is
installed, else a numpy Lawson-Hanson active-set solver. ``fit_step_model`` holds out a
quarter of each regime's steps and reports the mean absolute percentage error (MAPE)
per regime (``decode``, ``prefill``, ``mixed``) and overall.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _lawson_hanson(a: np.ndarray, b: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """``argmin ||a x - b||`` subject to ``x >= 0`` (Lawson & Hanson 1974, ch. 23)."""
    m, n = a.shape
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    w = a.T @ (b - a @ x)
    tol = 10 * np.finfo(float).eps * np.linalg.norm(a, 1) * max(m, n)
    for _ in range(max_iter or 3 * n):
        if passive.all() or (w[~passive] <= tol).all():
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
        x = z
        w = a.T @ (b - a @ x)
    return x


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares solution of ``a x ~ b``."""
    try:
        from scipy.optimize import nnls as scipy_nnls
    except ImportError:
        return _lawson_hanson(np.asarray(a, float), np.asarray(b, float))
    return scipy_nnls(a, b)[0]


def fit_coefficients(features: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Coefficients (``>= 0``) minimizing the relative squared error of ``features @ c``
    against ``times`` (seconds); all-zero feature columns get 0."""
    x = np.asarray(features, float)
    y = np.asarray(times, float)
    a = x / y[:, None]
    norms = np.linalg.norm(a, axis=0)
    used = norms > 0
    coef = np.zeros(x.shape[1])
    coef[used] = nnls(a[:, used] / norms[used], np.ones(len(y))) / norms[used]
    return coef


@dataclass
class FitResult:
    """Fitted coefficients and holdout errors (fractions, e.g. 0.05 = 5 %)."""

    coefficients: np.ndarray
    holdout_mape: dict[str, float]
    train_mape: dict[str, float]
    residual_quantiles: dict[str, float]
    num_train: int
    num_holdout: int


def split_holdout(
    regimes: list[str], fraction: float = 0.25, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(train, holdout) row indices: ``fraction`` of each regime's rows held out."""
    rng = np.random.default_rng(seed)
    train, hold = [], []
    for regime in sorted(set(regimes)):
        rows = rng.permutation([i for i, r in enumerate(regimes) if r == regime])
        k = int(round(len(rows) * fraction)) if len(rows) > 3 else 0
        hold.extend(rows[:k])
        train.extend(rows[k:])
    return np.array(sorted(train), dtype=int), np.array(sorted(hold), dtype=int)


def mape_by_regime(pred: np.ndarray, times: np.ndarray, regimes: list[str]) -> dict[str, float]:
    """MAPE (fraction) per regime and ``all``."""
    err = np.abs(pred - times) / times
    out = {"all": float(err.mean())} if err.size else {}
    for regime in sorted(set(regimes)):
        sel = np.array([r == regime for r in regimes])
        out[regime] = float(err[sel].mean())
    return out


def fit_step_model(
    features: np.ndarray, times: np.ndarray, regimes: list[str], seed: int = 0
) -> FitResult:
    """Fit on 75 % of each regime, report holdout MAPE per regime and residual
    quantiles (relative, holdout; ``p50_abs``, ``p90_abs``, ``p05``, ``p95``). With no
    holdout rows (``num_holdout`` 0) both are computed on the training rows."""
    x, y = np.asarray(features, float), np.asarray(times, float)
    train, hold = split_holdout(regimes, seed=seed)
    coef = fit_coefficients(x[train], y[train])
    pred = x @ coef
    reg = np.array(regimes)
    test = hold if hold.size else train
    rel = (pred[test] - y[test]) / y[test]
    quantiles = {
        "p05": float(np.quantile(rel, 0.05)),
        "p50_abs": float(np.quantile(np.abs(rel), 0.5)),
        "p90_abs": float(np.quantile(np.abs(rel), 0.9)),
        "p95": float(np.quantile(rel, 0.95)),
    }
    return FitResult(
        coefficients=coef,
        holdout_mape=mape_by_regime(pred[test], y[test], list(reg[test])),
        train_mape=mape_by_regime(pred[train], y[train], list(reg[train])),
        residual_quantiles=quantiles,
        num_train=int(train.size),
        num_holdout=int(hold.size),
    )
