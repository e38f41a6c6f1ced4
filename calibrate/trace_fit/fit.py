"""The fit loop: replay, linearize, solve, replay again until the factors settle.

A replay at the current efficiency factors gives the schedule; with it held fixed each
measured request gives two equations (arrival to first token, first token to finish:
:mod:`calibrate.trace_fit.solve`). Solving changes the step times, which changes the
schedule a little, so the loop replays again, up to ``max_iterations`` times or until no
coefficient moves by more than ``tolerance`` (relative). Each round moves the factors
``damping`` of the way to the solution (0.5 by default): under queueing a faster step
admits requests sooner, which shortens the very waits the equations were written for,
and the undamped loop swings between two answers (on the public Qwen3-32B TP 2 run it
alternated between a slow link and a slow all-reduce latency, its best replay at -6.2%
E2E; damped it settles to -1.3% in 8 rounds). The replay with the smallest
error (mean squared relative error of both intervals over all requests) is the answer:
its factors, and its errors as measured by a replay, not by the linearization.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from calibrate.roofline import RooflineEfficiency
from calibrate.roofline_terms import PARAMETERS, efficiency_of, theta_lower, theta_of
from calibrate.trace_fit.replay import Replay, replay
from calibrate.trace_fit.solve import data_shares, interval_rows, solve
from sim.app.run import RunSpec

PRIOR_WEIGHTS = {
    "memory": 0.2,
    "compute": 0.2,
    "attention": 0.05,
    "interconnect": 0.001,
    "allreduce_latency_s": 0.05,
    "attention_kernel_s": 0.02,
    "step_overhead_s": 0.005,
    "per_request_overhead_s": 0.005,
    "custom_allreduce_scale": 0.001,
}
"""How firmly the fit holds each factor at its prior (:func:`calibrate.trace_fit.solve.solve`'s
per-coefficient weight): by what backs the prior. Memory and compute efficiency are
fitted on real operator timings (Vidur's A100 GEMMs: 2-4% holdout error), so a trace
moves them only when it clearly must; attention less so; the link's bandwidth and the
custom all-reduce kernel's latency have no public measurement on PCIe GPUs, so the trace
decides them; the fixed costs per step, request and kernel lie between, and so does
NCCL's per-call latency (fitted on Vidur's A100 data). With one latency factor for both
kinds of call, held loosely, a fit to the public Qwen3-32B TP 2 run put the run's fixed
cost per step into it (321 us per NCCL call, nine times the fitted one), which the DP +
EP run of another model, whose MoE layers call NCCL, then paid as +31% E2E (both measured
with scripts/validate_serving.py before the custom kernel had a factor of its own). With one
weight for all, a fit to a tensor-parallel run put its all-reduce time into memory
efficiency and carried that to other models (docs/calibration.md)."""


@dataclass(frozen=True)
class Measured:
    """A real run's per-request engine-side times (seconds; any common clock)."""

    request_id: list[str]
    start_s: np.ndarray
    """When the engine received the request (queued)."""
    first_token_s: np.ndarray
    finish_s: np.ndarray
    output_tokens: np.ndarray

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "request_id": self.request_id,
                "ttft_s": self.first_token_s - self.start_s,
                "decode_s": self.finish_s - self.first_token_s,
                "output_tokens": self.output_tokens,
            }
        )


def errors(measured: pd.DataFrame, requests: pd.DataFrame) -> dict[str, float]:
    """Signed relative errors of a simulation's means (``requests``: its
    ``requests.csv``) against the measured ones (TTFT, TPOT, E2E; requests matched by
    id) and the per-request mean squared relative error of both intervals."""
    sim = requests.assign(
        ttft_s=requests["first_token_s"] - requests["arrival_s"],
        decode_s=requests["finish_s"] - requests["first_token_s"],
    )
    both = measured.merge(sim, on="request_id", suffixes=("_real", "_sim"))
    many = both["output_tokens_real"] > 1
    steps = (both["output_tokens_real"] - 1).clip(lower=1)

    def rel(real: pd.Series, simulated: pd.Series) -> float:
        return float(simulated.mean() / real.mean() - 1.0)

    ttft_r, ttft_s = both["ttft_s_real"], both["ttft_s_sim"]
    dec_r, dec_s = both["decode_s_real"], both["decode_s_sim"]
    sq = ((ttft_s - ttft_r) / ttft_r) ** 2
    sq_dec = ((dec_s[many] - dec_r[many]) / dec_r[many]) ** 2
    return {
        "ttft_mean": rel(ttft_r, ttft_s),
        "tpot_mean": rel((dec_r / steps)[many], (dec_s / steps)[many]),
        "e2e_mean": rel(ttft_r + dec_r, ttft_s + dec_s),
        "mean_sq_rel": float(np.concatenate([sq, sq_dec]).mean()),
        "num_requests": float(len(both)),
    }


@dataclass
class Iteration:
    """One round of the loop: its factors and each run's errors (``errors``)."""

    efficiency: RooflineEfficiency
    errors: list[dict[str, float]]
    data_share: dict[str, float] = field(default_factory=dict)
    """Per factor, how much the runs' equations at this round decide it rather than the
    prior (:func:`calibrate.trace_fit.solve.data_shares`): 0 to 1."""

    @property
    def objective(self) -> float:
        """The mean over runs of their mean squared relative error."""
        return float(np.mean([e["mean_sq_rel"] for e in self.errors]))


@dataclass
class TraceFit:
    """The answer (``efficiency``, per-run ``errors``), the prior's, every round, and how
    much the runs decided each factor."""

    efficiency: RooflineEfficiency
    errors: list[dict[str, float]]
    prior: RooflineEfficiency
    prior_errors: list[dict[str, float]]
    iterations: list[Iteration] = field(default_factory=list)
    data_share: dict[str, float] = field(default_factory=dict)
    """The answer's round's ``Iteration.data_share``: per factor, how much the runs
    decided it (0: the prior alone, 1: the runs alone)."""


def _rows(measured: pd.DataFrame, rep: Replay, theta: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(rows, measured seconds, idle seconds)``: both intervals of every request (the
    decode interval only where more than one token was generated)."""
    times = ["arrival_s", "first_token_s", "finish_s"]
    both = measured.merge(rep.requests[["request_id", "replica", *times]], on="request_id")
    line = np.asarray(rep.line_of_replica)[both["replica"].to_numpy()]
    ttft_rows, dec_rows = np.zeros((len(both), len(theta))), np.zeros((len(both), len(theta)))
    ttft_idle, dec_idle = np.zeros(len(both)), np.zeros(len(both))
    for k, steps in enumerate(rep.lines):  # each request on its replica's time line
        on = line == k
        arrive, first, finish = (both[c].to_numpy(np.float64)[on] for c in times)
        args = (steps.starts, steps.durations, steps.terms, theta)
        ttft_rows[on], ttft_idle[on] = interval_rows(*args, arrive, first)
        dec_rows[on], dec_idle[on] = interval_rows(*args, first, finish)
    many = both["output_tokens"].to_numpy() > 1
    rows = np.vstack([ttft_rows, dec_rows[many]])
    idle = np.concatenate([ttft_idle, dec_idle[many]])
    y = np.concatenate([both["ttft_s"].to_numpy(), both["decode_s"].to_numpy()[many]])
    keep = y > 1e-4
    return rows[keep], y[keep], idle[keep]


def run_weights(num_rows: list[int]) -> np.ndarray:
    """Row weights that make every run weigh alike in the fit whatever its length: each
    run's rows scaled by ``sqrt(mean rows per run / its rows)``, so the squared weights
    of each run sum to the same."""
    mean = sum(num_rows) / len(num_rows)
    return np.concatenate([np.full(k, np.sqrt(mean / k)) for k in num_rows])


def _round(
    runs: list[tuple[RunSpec, pd.DataFrame]], theta: np.ndarray
) -> tuple[Iteration, list[tuple[np.ndarray, ...]]]:
    """Replay every run at ``theta``: the round's errors and each run's equations."""
    eff = efficiency_of(theta)
    errs, systems = [], []
    for spec, real in runs:
        rep = replay(spec, eff)
        errs.append(errors(real, rep.requests))
        rows, y, idle = _rows(real, rep, theta)
        systems.append((rows, y, idle))
    return Iteration(eff, errs), systems


def fit_trace(
    runs: list[tuple[RunSpec, Measured]],
    prior: RooflineEfficiency | None = None,
    *,
    prior_weight: float | np.ndarray | None = None,
    max_iterations: int = 8,
    tolerance: float = 0.003,
    damping: float = 0.5,
) -> TraceFit:
    """Fit ``prior``'s factors (default: the roofline's defaults) so that replaying each
    run (a ``RunSpec`` with the trace, model, GPU and engine of a measured run; every
    run on the same GPU) gives its measured request times. Runs of different models
    and tensor-parallel sizes tell apart factors one run cannot (a one-GPU run says
    nothing of the all-reduce; one model's steps read the same weights every time).
    ``damping`` in (0, 1]: the share of each round's step towards its solution."""
    if not 0 < damping <= 1:
        raise ValueError(f"damping must be in (0, 1], got {damping!r}")
    if not runs:
        raise ValueError("--from-trace: no runs to fit")
    if prior_weight is None:
        prior_weight = np.array([PRIOR_WEIGHTS[name] for name in PARAMETERS])
    prior = prior or RooflineEfficiency()
    frames = [(spec, m.frame()) for spec, m in runs]
    theta_prior = theta_of(prior)
    lower = theta_lower()
    theta = theta_prior
    history: list[Iteration] = []
    for _ in range(max_iterations):
        it, systems = _round(frames, theta)
        history.append(it)
        rows, y, idle, weight = _stacked(systems)
        it.data_share = _shares(rows, y, theta_prior, prior_weight, weight)
        solved = solve(rows, y, idle, theta_prior, lower, prior_weight, weight)
        new = theta + damping * (solved - theta)
        moved = np.max(np.abs(new - theta) / np.maximum(np.abs(theta), 1e-12))
        theta = new
        if moved < tolerance:
            last, systems = _round(frames, theta)
            rows, y, _, weight = _stacked(systems)
            last.data_share = _shares(rows, y, theta_prior, prior_weight, weight)
            history.append(last)
            break
    best = min(history[1:] or history, key=lambda it: it.objective)
    return TraceFit(
        best.efficiency, best.errors, prior, history[0].errors, history, best.data_share
    )


def _stacked(systems: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """Every run's equations as one system: ``(rows, measured, idle, row weights)``."""
    weight = run_weights([len(y) for _, y, _ in systems])
    rows = np.vstack([r for r, _, _ in systems])
    y = np.concatenate([y for _, y, _ in systems])
    idle = np.concatenate([i for _, _, i in systems])
    return rows, y, idle, weight


def _shares(
    rows: np.ndarray,
    y: np.ndarray,
    theta_prior: np.ndarray,
    prior_weight: float | np.ndarray,
    weight: np.ndarray,
) -> dict[str, float]:
    """``data_shares`` by factor name, to 4 decimals (a diagnostic: rounding noise off)."""
    shares = data_shares(rows, y, theta_prior, prior_weight, weight)
    return dict(zip(PARAMETERS, (round(float(x), 4) for x in shares)))
