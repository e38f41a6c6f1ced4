"""The measurement window (MSER-5 warm-up cut, end at the last arrival) and its batch-means
confidence intervals, checked against queueing theory.

With ``--latency-model constant`` (step time ``s``), ``max_num_seqs`` 1 and fixed
prompt and output lengths (``L`` tokens, the prompt in one step), every request is
served for exactly ``D = L * s`` with one request at a time: an M/D/1 queue. Its mean
wait is the Pollaczek-Khinchine value ``Wq = rho * D / (2 (1 - rho))`` and a
request's TTFT is its wait plus its prefill step, ``Wq + s``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sim_run_helpers import column, kvsim_cli, read_csv, run_sim, write_yaml

from sim.records.window import distribution, find_window, min_batch_for, mser_truncation, rate

STEP_S = 0.01
OUTPUT_LEN = 10
SERVICE_S = STEP_S * OUTPUT_LEN


def test_mser_cuts_a_transient_and_nothing_from_a_stationary_series() -> None:
    rng = np.random.default_rng(7)
    noise = rng.normal(1.0, 0.1, 4000)
    drop, at_limit = mser_truncation(noise)
    assert drop <= 200 and not at_limit
    warm = noise.copy()
    warm[:500] -= np.linspace(0.8, 0.0, 500)  # starts low and climbs to steady
    drop, at_limit = mser_truncation(warm)
    assert 250 <= drop <= 800 and not at_limit
    drop, at_limit = mser_truncation(np.linspace(0.0, 10.0, 4000) + noise)  # saturating
    assert at_limit
    assert mser_truncation(np.full(4000, 0.01)) == (0, False)  # constant: no warm-up
    assert mser_truncation(noise[:15]) == (0, False)  # too short to judge


def test_intervals_cover_the_true_mean_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(11)
    covered = 0
    trials = 300
    for _ in range(trials):
        d = distribution(rng.exponential(2.0, 1000))
        lo, hi = d["ci95"]["mean"]
        covered += lo <= 2.0 <= hi
    assert 0.90 <= covered / trials <= 0.99
    # p99 needs 10 batches of 500 requests; p90 10 of 50.
    assert min_batch_for(99) == 500 and min_batch_for(90) == 50
    d = distribution(rng.exponential(2.0, 1000))
    assert d["ci95"]["p90"] is not None and d["ci95"]["p99"] is None
    assert distribution(rng.exponential(2.0, 30))["ci95"]["mean"] is None


def test_rate_counts_events_in_the_window() -> None:
    times = np.arange(0.0, 100.0, 0.5)  # 2 per second
    r = rate(times, 10.0, 60.0)
    assert r["value"] == pytest.approx(101 / 50)
    lo, hi = r["ci95"]
    assert lo <= r["value"] <= hi


def test_window_starts_after_warmup_and_ends_at_the_last_arrival() -> None:
    rng = np.random.default_rng(3)
    arrival = np.sort(rng.uniform(0, 100, 2000))
    ttft = rng.exponential(0.1, 2000)
    ttft[:300] *= np.linspace(0.0, 1.0, 300)  # empty system at the start
    tpot = np.full(2000, np.nan)
    win = find_window(arrival, arrival + ttft + 0.5, ttft, tpot)
    assert 0 < win.warmup_requests <= 600
    assert win.start_s == arrival[win.warmup_requests] and win.end_s == arrival[-1]
    assert win.mask.sum() == 2000 - win.warmup_requests


def _md1(tmp_path: Path, rho: float, seed: int, n: int) -> dict:
    workload = write_yaml(
        tmp_path / f"md1-{rho}.yaml",
        {
            "name": "md1",
            "seed": seed,
            "arrival": {"type": "poisson", "rate": rho / SERVICE_S},
            "prompt_len": 32,
            "output_len": OUTPUT_LEN,
            "num_requests": n,
        },
    )
    return run_sim(
        workload,
        tmp_path / f"md1-{rho}",
        latency_model="constant",
        constant_step_s=STEP_S,
        max_num_seqs=1,
    )


@pytest.mark.parametrize("rho", [0.3, 0.6, 0.8])
def test_ttft_matches_pollaczek_khinchine(tmp_path: Path, rho: float) -> None:
    window = _md1(tmp_path, rho, seed=1, n=12_000)["window"]
    expected = rho * SERVICE_S / (2 * (1 - rho)) + STEP_S
    lo, hi = window["ttft_s"]["ci95"]["mean"]
    assert lo <= expected <= hi, (expected, lo, hi)
    assert (hi - lo) / 2 < 0.15 * expected  # the interval is informative, not huge
    # TPOT is one step exactly; E2E is wait + service.
    assert window["tpot_s"]["mean"] == pytest.approx(STEP_S)
    assert window["e2e_s"]["mean"] == pytest.approx(expected - STEP_S + SERVICE_S, rel=0.15)
    assert not window["warnings"] or "p99" in window["warnings"][0]


def test_littles_law_over_the_window(tmp_path: Path) -> None:
    summary = _md1(tmp_path, 0.6, seed=2, n=12_000)
    window = summary["window"]
    _, cols = read_csv(tmp_path / "md1-0.6" / "requests.csv")
    arrival, finish = column(cols, "arrival_s"), column(cols, "finish_s")
    a, b = window["start_s"], window["end_s"]
    # Time-average number in system over [a, b] from each request's overlap with it.
    in_system = np.clip(np.minimum(finish, b) - np.maximum(arrival, a), 0, None).sum() / (b - a)
    lam = window["throughput_rps"]["value"]
    lo, hi = window["e2e_s"]["ci95"]["mean"]
    t_lo, t_hi = window["throughput_rps"]["ci95"]
    assert t_lo * lo <= in_system <= t_hi * hi
    assert in_system == pytest.approx(lam * window["e2e_s"]["mean"], rel=0.05)


def test_quickstart_window_throughput_matches_its_arrivals(tmp_path: Path) -> None:
    summary = run_sim("chat", tmp_path / "chat")
    window = summary["window"]
    assert window["throughput_rps"]["value"] == pytest.approx(window["offered_rps"], rel=0.03)
    # The whole-run figure includes the drain after the last arrival and reads lower.
    assert summary["throughput_rps"] < window["throughput_rps"]["value"]
    assert window["end_s"] < summary["sim_duration_s"]
    assert window["warmup_requests"] < summary["num_finished"] // 2


def test_cli_and_report_show_the_window_with_intervals(tmp_path: Path) -> None:
    workload = write_yaml(
        tmp_path / "w.yaml",
        {
            "arrival": {"type": "poisson", "rate": 8.0},
            "prompt_len": 200,
            "output_len": 50,
            "num_requests": 400,
        },
    )
    proc = kvsim_cli("run", str(workload), "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    assert "throughput (window)" in proc.stdout and "±" in proc.stdout
    assert "throughput (whole run, with drain)" in proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if "measurement window" in line]
    assert warnings == [
        "kvsim: warning: measurement window: window too short for a p99 interval "
        f"({json.loads((tmp_path / 'run' / 'summary.json').read_text())['window']['num_requests']}"
        " requests; 5,000 needed)"
    ]
    page = (tmp_path / "run" / "report.html").read_text()
    assert "Steady state (measurement window)" in page and "±" in page
    assert "window too short for a p99 interval" in page


@pytest.mark.parametrize(("rho", "state"), [(0.5, "steady"), (1.2, "saturated")])
def test_verdict_does_not_depend_on_run_length(tmp_path: Path, rho: float, state: str) -> None:
    for n in (1000, 4000):
        assert _md1(tmp_path, rho, seed=5, n=n)["verdict"]["state"] == state, n


def test_a_run_still_filling_is_undecided_not_steady(tmp_path: Path) -> None:
    """Chat at 40 req/s on the default H100: after 1,000 requests the batch is still
    growing (latencies look flat, the number in system does not); 20,000 requests show
    it saturates."""
    workload = write_yaml(
        tmp_path / "chat40.yaml",
        {
            "seed": 0,
            "arrival": {"type": "poisson", "rate": 40.0},
            "prompt_len": {"type": "lognormal", "median": 200, "p90": 900, "max": 4096},
            "output_len": {"type": "lognormal", "median": 150, "p90": 600, "max": 2048},
            "num_requests": 1000,
        },
    )
    verdict = run_sim(workload, tmp_path / "chat40")["verdict"]
    assert verdict["state"] == "undecided"
    assert verdict["reasons"][0].startswith("rising: ") and "run longer" in verdict["reasons"][0]
