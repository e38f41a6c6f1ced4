"""Little's law: the queue lengths of ``steps.csv`` agree with the sojourns of ``requests.csv``.

Setup: 400 Poisson requests at 8 req/s, constant 10 ms steps, ``max_num_seqs`` 8, so
the replica runs near saturation and requests queue (``num_waiting`` > 0 often).

Definitions. A request is *in the system* from its ``arrival_s`` to its ``finish_s``
(so it counts while it waits, also before the engine admits it). N(t) is the number in
the system at time t.

- From ``requests.csv``: the integral of N(t) over a window [a, b] is the sum over
  requests of the overlap of [arrival_s, finish_s] with [a, b]; over the whole run
  [0, T] (T = ``sim_duration_s``, every request finished) it is the sum of E2E times,
  so its time average is L = lambda * W with lambda = ``throughput_rps`` and
  W = mean E2E.
- From ``steps.csv``: each step contributes ``duration_s * (num_running +
  num_waiting)``, clipped to the window; idle time (no step) counts as empty.

The step records see each request about 1.5 steps less than its sojourn (its counts
are taken after the step's finished requests leave, and arrivals join at the next step
boundary): a bias of ~1.5 x 10 ms per request, about 1% of L here. Tolerance: 2%
relative, on the whole run and on the steady-state window [0.2 T, 0.8 T].

lambda x W of the requests *arriving* in the window is a sample estimate, not an
identity: at utilisation ~0.9 a 30 s window holds ~250 arrivals whose sojourns are
strongly correlated (a burst early in the window leaves its backlog to later arrivals),
and over seeds 1-8 it landed at 0.985-1.204 of L when measured (once, by hand: the
fixture's seed gives 1.204). It is checked to ``LAMBDA_W_TOL``
(25%), which still catches a wrong W or lambda (off by a factor).
"""

from __future__ import annotations

import numpy as np
import pytest
from sim_run_helpers import column, read_csv, run_sim, write_yaml

REL_TOL = 0.02
LAMBDA_W_TOL = 0.25


@pytest.fixture(scope="module")
def loaded_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("little")
    workload = write_yaml(
        tmp / "little.yaml",
        {
            "name": "little",
            "seed": 3,
            "arrival": {"type": "poisson", "rate": 8.0},
            "prompt_len": {"type": "lognormal", "median": 200, "p90": 900, "max": 4096},
            "output_len": {"type": "lognormal", "median": 60, "p90": 200, "max": 1024},
            "num_requests": 400,
        },
    )
    summary = run_sim(
        workload,
        tmp / "out",
        latency_model="constant",
        constant_step_s=0.01,
        max_num_seqs=8,
        max_model_len=8192,
    )
    _, steps = read_csv(tmp / "out" / "steps.csv")
    _, reqs = read_csv(tmp / "out" / "requests.csv")
    return summary, steps, reqs


def _steps_integral(steps, a: float, b: float) -> float:
    start = column(steps, "start_s")
    end = start + column(steps, "duration_s")
    n = column(steps, "num_running") + column(steps, "num_waiting")
    return float(((np.clip(end, a, b) - np.clip(start, a, b)) * n).sum())


def _requests_integral(reqs, a: float, b: float) -> float:
    arrival, finish = column(reqs, "arrival_s"), column(reqs, "finish_s")
    return float((np.clip(finish, a, b) - np.clip(arrival, a, b)).sum())


def test_run_is_loaded_and_queues(loaded_run):
    """Guard: the setup really queues (else Little's law would ignore num_waiting)."""
    summary, steps, _ = loaded_run
    assert summary["num_finished"] == 400
    waiting = column(steps, "num_waiting")
    assert waiting.max() >= 5 and (waiting > 0).mean() > 0.2


def test_littles_law_whole_run(loaded_run):
    """Time-average of running + waiting over the steps = throughput x mean E2E (2%)."""
    summary, steps, reqs = loaded_run
    total = summary["sim_duration_s"]
    assert total == pytest.approx(float(column(reqs, "finish_s").max()), abs=1e-6)
    l_steps = _steps_integral(steps, 0.0, total) / total
    l_little = summary["throughput_rps"] * summary["e2e_s"]["mean"]
    l_requests = _requests_integral(reqs, 0.0, total) / total
    assert l_little == pytest.approx(l_requests, rel=1e-6)
    assert l_steps == pytest.approx(l_little, rel=REL_TOL)


def test_littles_law_steady_state_window(loaded_run):
    """Over [0.2 T, 0.8 T] the mean number in system from the steps matches the requests'
    overlap with the window (2%), and lambda x W of the requests arriving in it (25%)."""
    summary, steps, reqs = loaded_run
    total = summary["sim_duration_s"]
    a, b = 0.2 * total, 0.8 * total
    l_steps = _steps_integral(steps, a, b) / (b - a)
    l_requests = _requests_integral(reqs, a, b) / (b - a)
    assert l_steps == pytest.approx(l_requests, rel=REL_TOL)
    arrival, finish = column(reqs, "arrival_s"), column(reqs, "finish_s")
    inside = (arrival >= a) & (arrival < b)
    lam_w = inside.sum() / (b - a) * float((finish - arrival)[inside].mean())
    assert lam_w == pytest.approx(l_steps, rel=LAMBDA_W_TOL)
