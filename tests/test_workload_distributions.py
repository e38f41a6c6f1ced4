"""Length and arrival distributions match their parameters.

Fixed seeds; tolerances: means within 3% over 20,000 samples, variances (CV^2)
within 10%, quantiles within 5%.
"""

from __future__ import annotations

import math
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
from pydantic import TypeAdapter

from workloads.arrivals import arrival_times
from workloads.distributions import make_sampler
from workloads.spec import SharedPrefix
from workloads.spec_arrivals import ArrivalSpec
from workloads.spec_lengths import LengthDist

N = 20_000
DATA = Path(__file__).parent / "data" / "workloads"
LENGTHS = TypeAdapter(LengthDist)
ARRIVALS = TypeAdapter(ArrivalSpec)


def draw(dist: dict, seed: int = 0, n: int = N) -> tuple[np.ndarray, float]:
    sampler = make_sampler(LENGTHS.validate_python(dist), DATA, "test", "prompt_len")
    return sampler.draw_many(np.random.default_rng(seed), n), sampler.mean()


def gaps(arrival: dict, seed: int = 0, n: int = N) -> np.ndarray:
    times = np.fromiter(
        islice(
            arrival_times(ARRIVALS.validate_python(arrival), np.random.default_rng(seed)), n + 1
        ),
        dtype=float,
    )
    assert times[0] == 0.0  # the first request arrives at t = 0, as in vllm bench serve
    assert np.all(np.diff(times) >= 0)
    return np.diff(times)


def test_fixed():
    values, mean = draw(7)
    assert set(values.tolist()) == {7} and mean == 7


def test_uniform():
    values, mean = draw({"type": "uniform", "min": 10, "max": 30})
    assert values.min() == 10 and values.max() == 30
    assert values.mean() == pytest.approx(20, rel=0.03) and mean == 20
    counts = np.bincount(values - 10)
    assert counts.min() > 0.8 * N / 21


def test_normal():
    values, mean = draw({"type": "normal", "mean": 500, "std": 100})
    assert values.mean() == pytest.approx(500, rel=0.03)
    assert values.std() == pytest.approx(100, rel=0.05)
    assert mean == pytest.approx(500, rel=1e-6)


def test_normal_is_clipped_to_at_least_one_and_mean_accounts_for_it():
    values, mean = draw({"type": "normal", "mean": 5, "std": 10, "max": 20})
    assert values.min() >= 1 and values.max() <= 20
    assert values.mean() == pytest.approx(mean, rel=0.03, abs=0.3)


@pytest.mark.parametrize(
    "dist",
    [
        {"type": "lognormal", "median": 200, "p90": 900},
        {"type": "lognormal", "median": 150, "sigma": 1.0},
        {"type": "lognormal", "mean": 300, "sigma": 0.5},
    ],
)
def test_lognormal(dist):
    values, mean = draw(dist)
    spec = LENGTHS.validate_python(dist)
    mu, sigma = spec.mu_sigma()
    assert np.median(values) == pytest.approx(math.exp(mu), rel=0.05)
    assert np.quantile(values, 0.9) == pytest.approx(
        math.exp(mu + 1.2815515655446004 * sigma), rel=0.05
    )
    assert values.mean() == pytest.approx(math.exp(mu + sigma**2 / 2), rel=0.03)
    assert mean == pytest.approx(math.exp(mu + sigma**2 / 2), rel=0.01)
    if "mean" in dist:
        assert values.mean() == pytest.approx(dist["mean"], rel=0.03)


def test_lognormal_max_clips_and_mean_follows():
    values, mean = draw({"type": "lognormal", "median": 200, "p90": 900, "max": 500})
    assert values.max() == 500
    assert values.mean() == pytest.approx(mean, rel=0.03)


def test_empirical_draws_the_file_values_with_their_frequencies():
    values, mean = draw({"type": "empirical", "path": "lengths.txt"})
    assert set(values.tolist()) == {10, 20, 50}
    assert (values == 20).mean() == pytest.approx(0.5, abs=0.02)
    assert mean == pytest.approx(25) and values.mean() == pytest.approx(25, rel=0.03)


def test_poisson_gaps():
    g = gaps({"type": "poisson", "rate": 8})
    assert g.mean() == pytest.approx(1 / 8, rel=0.03)
    assert g.var() / g.mean() ** 2 == pytest.approx(1.0, rel=0.1)


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 2.0, 4.0])
def test_gamma_burstiness_sets_cv2(burstiness):
    g = gaps({"type": "gamma", "rate": 5, "burstiness": burstiness})
    assert g.mean() == pytest.approx(1 / 5, rel=0.03)
    assert g.var() / g.mean() ** 2 == pytest.approx(1 / burstiness, rel=0.1)


def test_constant_gaps():
    g = gaps({"type": "constant", "rate": 4})
    assert np.allclose(g, 0.25)


def test_burst_all_at_zero():
    assert np.all(gaps({"type": "burst"}, n=100) == 0)


def test_piecewise_rates_per_segment():
    spec = {
        "type": "piecewise",
        "segments": [{"until_s": 1000, "rate": 2}, {"until_s": 1500, "rate": 0}, {"rate": 10}],
    }
    times = np.cumsum(np.concatenate([[0.0], gaps(spec, n=20_000)]))
    first = ((times >= 0) & (times < 1000)).sum()
    assert first / 1000 == pytest.approx(2, rel=0.05)
    assert ((times >= 1000) & (times < 1500)).sum() == 0
    later = ((times >= 1500) & (times < 2500)).sum()
    assert later / 1000 == pytest.approx(10, rel=0.05)


def test_piecewise_starting_at_rate_zero_waits():
    spec = {"type": "piecewise", "segments": [{"until_s": 30, "rate": 0}, {"rate": 1}]}
    times = list(islice(arrival_times(ARRIVALS.validate_python(spec), np.random.default_rng(0)), 5))
    assert times[0] == 30.0 and all(t >= 30 for t in times)


def test_piecewise_burstiness():
    spec = {"type": "piecewise", "segments": [{"rate": 3}], "burstiness": 0.5}
    g = gaps(spec)
    assert g.mean() == pytest.approx(1 / 3, rel=0.03)
    assert g.var() / g.mean() ** 2 == pytest.approx(2.0, rel=0.1)


def test_arrivals_same_seed_same_times_different_seed_different():
    a = gaps({"type": "poisson", "rate": 1}, seed=1, n=100)
    b = gaps({"type": "poisson", "rate": 1}, seed=1, n=100)
    c = gaps({"type": "poisson", "rate": 1}, seed=2, n=100)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_zipf_and_uniform_popularity():
    zipf = SharedPrefix(num_groups=4, prefix_len=8, popularity={"type": "zipf", "s": 1.0})
    weights = np.array([1, 1 / 2, 1 / 3, 1 / 4])
    assert zipf.probabilities() == pytest.approx((weights / weights.sum()).tolist())
    flat = SharedPrefix(num_groups=4, prefix_len=8)
    assert flat.probabilities() == pytest.approx([0.25] * 4)
