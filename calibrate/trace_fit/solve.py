"""Measured request times as linear functions of the efficiency coefficients.

Given one replay's steps (starts, durations, roofline terms ``X_s``; one engine, steps
back to back or with idle gaps), the busy time before simulated time ``t`` is
``G(t) . theta``, with ``G(t)`` the terms of the steps before ``t`` plus the started
fraction of the step running at ``t``. A request interval ``[a, b]`` (arrival to first
token, first token to finish) then lasts ``idle + (G(b) - G(a)) . theta``, where the idle
part is what the replay spent waiting for arrivals. Holding the schedule fixed, a
measured duration ``y`` gives one linear equation in ``theta``.

The fit solves those equations in relative terms (each row divided by its ``y``) with a
weak pull towards the prior coefficients (ridge in ``theta / theta_prior``, so terms a
trace cannot tell apart, such as the all-reduce of a one-GPU run, stay at the prior),
under the bounds: efficiencies at most 1, times at least 0. Solved as non-negative least
squares (``calibrate.fit.nnls``) in the shifted variable. :func:`data_shares` says, for
the same equations, how much of each coefficient they decide and how much the prior does.
"""

from __future__ import annotations

import numpy as np

from calibrate.fit import nnls


def busy_terms(
    starts: np.ndarray, durations: np.ndarray, terms: np.ndarray, t: np.ndarray
) -> np.ndarray:
    """``G(t)`` for each time in ``t``: ``[len(t), terms.shape[1]]``."""
    cum = np.vstack([np.zeros((1, terms.shape[1])), np.cumsum(terms, axis=0)])
    t = np.asarray(t, dtype=np.float64)
    i = np.searchsorted(starts, t, side="right") - 1
    inside = i >= 0
    j = np.where(inside, i, 0)
    d = durations[j]
    frac = np.where(d > 0, np.clip((t - starts[j]) / np.where(d > 0, d, 1.0), 0.0, 1.0), 1.0)
    out = cum[j] + terms[j] * frac[:, None]
    return np.where(inside[:, None], out, 0.0)


def interval_rows(
    starts: np.ndarray,
    durations: np.ndarray,
    terms: np.ndarray,
    theta: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, idle)`` of intervals ``[a, b]``: the terms they cover and the seconds
    of them no step covered (at ``theta``, the replay's coefficients)."""
    rows = busy_terms(starts, durations, terms, b) - busy_terms(starts, durations, terms, a)
    idle = np.maximum((np.asarray(b) - np.asarray(a)) - rows @ theta, 0.0)
    return rows, idle


def _scaled(
    rows: np.ndarray,
    measured: np.ndarray,
    prior: np.ndarray,
    prior_weight: float | np.ndarray,
    row_weights: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(a, w, v)``: the rows in relative terms and in ``psi = theta / prior``, each
    times its row weight ``v``; the ridge weight of each coefficient (see :func:`solve`)."""
    v = np.ones(len(measured)) if row_weights is None else np.asarray(row_weights, float)
    a = rows / measured[:, None] * prior[None, :] * v[:, None]
    w = prior_weight * np.sqrt(float(np.sum(v**2)))
    return a, np.broadcast_to(np.asarray(w, dtype=np.float64), (len(prior),)), v


def solve(
    rows: np.ndarray,
    measured: np.ndarray,
    idle: np.ndarray,
    prior: np.ndarray,
    lower: np.ndarray,
    prior_weight: float | np.ndarray,
    row_weights: np.ndarray | None = None,
) -> np.ndarray:
    """``theta >= lower`` minimizing ``sum_r v_r^2 ((idle_r + rows_r . theta) /
    measured_r - 1)^2 + w^2 sum_k (theta_k / prior_k - 1)^2``, with ``v`` the
    ``row_weights`` (default 1) and ``w = prior_weight * sqrt(sum v^2)`` (one weight, or
    one per coefficient: the prior's confidence in each)
    (``measured``, ``idle``: seconds per row; ``measured > 0``)."""
    a, w, v = _scaled(rows, measured, prior, prior_weight, row_weights)
    lo = lower / prior
    stacked = np.vstack([a, np.diag(w)])
    rhs = np.concatenate([(1.0 - idle / measured) * v - a @ lo, w * (1.0 - lo)])
    phi = nnls(stacked, rhs)
    return (lo + phi) * prior


def data_shares(
    rows: np.ndarray,
    measured: np.ndarray,
    prior: np.ndarray,
    prior_weight: float | np.ndarray,
    row_weights: np.ndarray | None = None,
) -> np.ndarray:
    """How much of each coefficient the measured rows decide, in [0, 1]: the share of its
    prior variance that :func:`solve`'s equations remove, ``1 - w_k^2 [(A^T A +
    W^2)^-1]_kk`` in ``psi = theta / prior`` (the linearised problem, bounds ignored;
    the noise scale cancels). Near 1: the runs set it; near 0: the prior does, because no
    row holds its term or because another coefficient's term has the same shape across
    the rows and is held more loosely (then the runs fix only their sum)."""
    a, w, _ = _scaled(rows, measured, prior, prior_weight, row_weights)
    w2 = w**2
    cov = np.linalg.inv(a.T @ a + np.diag(w2))
    return np.clip(1.0 - w2 * np.diag(cov), 0.0, 1.0)
