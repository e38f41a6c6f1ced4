"""Plots of one run, drawn from its ``steps.csv`` and ``requests.csv`` (and the
summary's measurement window).

- ``timeline.png``: KV cache usage, running and waiting requests, and preemptions on
  one shared time axis (a cluster's replicas summed; KV usage their mean), the
  measurement window shaded: cause and effect line up (:mod:`reports.step_plots`).
- ``replicas.png`` (several replicas): small multiples, one row per replica, KV usage
  and queues on shared axes (:mod:`reports.step_plots`).
- ``latency.png``: TTFT, TPOT and E2E histograms (ms, requests on y) of the window's
  requests, p50 / p90 / p99 marked and printed.
- ``spec_acceptance.png`` (speculative decoding): :mod:`reports.spec_plot`.
- ``pd.png`` (prefill/decode disaggregation): :mod:`reports.pd_plot`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from reports.figures import measurement_window, save_png  # noqa: E402
from reports.step_bins import bin_steps  # noqa: E402
from reports.step_plots import plot_replicas, plot_timeline  # noqa: E402
from reports.step_stream import StepRows  # noqa: E402

_PERCENTILES = (("p50", "-", "black"), ("p90", "--", "tab:orange"), ("p99", ":", "tab:red"))


def _latencies(requests: pd.DataFrame) -> dict[str, pd.Series]:
    """Each request's TTFT, TPOT (requests with more than one output token) and E2E
    latency, seconds."""
    multi = requests["output_tokens"] > 1
    tpot = (requests["finish_s"] - requests["first_token_s"])[multi] / (
        requests["output_tokens"][multi] - 1
    )
    return {
        "ttft_s": requests["first_token_s"] - requests["arrival_s"],
        "tpot_s": tpot,
        "e2e_s": requests["finish_s"] - requests["arrival_s"],
    }


def plot_latency(requests: pd.DataFrame, path: Path, summary: dict[str, Any] | None = None) -> Path:
    """Histograms of TTFT, TPOT and E2E latency (ms) with p50 / p90 / p99 marked and
    printed: the measurement window's requests and percentiles when ``summary`` has a
    window, else every finished request's."""
    window = measurement_window(summary)
    scope = "all finished requests"
    stats: dict[str, Any] = {}
    if window is not None:
        # requests.csv holds 9 significant digits: the window's first and last
        # arrivals may round just outside it.
        slack = 1e-8 * max(abs(window[1]), 1.0)
        arrival = requests["arrival_s"]
        inside = (arrival >= window[0] - slack) & (arrival <= window[1] + slack)
        requests = requests[inside]
        scope = "measurement window"
        stats = summary["window"]  # type: ignore[index]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
    names = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E latency"}
    for ax, (key, values) in zip(axes, _latencies(requests).items()):
        values = values.dropna() * 1e3
        ax.set(xlabel="ms", ylabel="requests")
        if values.empty:
            ax.set_title(f"{names[key]}: no requests", fontsize=10)
            continue
        marks = {
            q: (stats[key][q] * 1e3 if key in stats else float(values.quantile(int(q[1:]) / 100)))
            for q, _, _ in _PERCENTILES
        }
        lo, hi = float(values.min()), float(values.quantile(0.999))
        hi = max(hi, marks["p99"])
        beyond = int((values > hi).sum())
        if hi - lo > 1e-9 * max(abs(hi), 1e-12):
            ax.hist(
                values, bins=50, range=(lo, hi), histtype="stepfilled", color="tab:blue", alpha=0.75
            )
        else:  # equal values (a constant step time): one bar
            ax.hist(values, bins=1, histtype="stepfilled", color="tab:blue", alpha=0.75)
        for q, ls, color in _PERCENTILES:
            ax.axvline(marks[q], color=color, ls=ls, lw=1.2, label=f"{q} {marks[q]:,.1f} ms")
        more = f"\n({beyond:,} beyond the axis)" if beyond else ""
        ax.set_title(f"{names[key]}: {len(values):,} requests{more}", fontsize=10)
        ax.legend(fontsize=9, framealpha=0.9)
    fig.suptitle(f"Latency distributions ({scope})", fontsize=12)
    fig.tight_layout()
    return save_png(fig, path)


def render_run_plots(
    run_dir: Path,
    num_gpu_blocks: int,
    steps: pd.DataFrame | StepRows | Callable[[], pd.DataFrame | StepRows] | None = None,
    requests: pd.DataFrame | None = None,
    summary: dict[str, Any] | None = None,
    note: str = "",
    parallel: bool = False,
) -> list[Path]:
    """Write ``plots/*.png`` for a run directory (removing kvsim's earlier PNGs there);
    return the files written, in report order.

    ``steps`` / ``requests``: the rows to plot (e.g. checked ones from
    :func:`reports.run_records.read_step_records`; ``steps`` may be a steps file's
    rows binned in chunks, :class:`reports.step_stream.StepRows`); None reads
    ``steps.csv`` / ``requests.csv`` as they are; ``steps`` may also be a function that
    reads them (called once). No step rows (``--steps none``): no timeline or replica
    plots. ``note``: appended to the timeline's title (e.g. thinned steps).
    ``parallel``: draw the plots of the requests (latency, speculative decoding, P/D) in
    a forked child while this process reads the steps (a function ``steps``) and draws
    their plots (the same files; where the child cannot start or fails, they are drawn
    here after). Without it, ``steps`` is read before any earlier PNG is removed; with
    it, after the child starts (for a new run's directory, which has none).
    """
    if requests is None:
        requests = pd.read_csv(run_dir / "requests.csv")
    if not parallel:
        steps = _steps(run_dir, steps)
    plots = Path(run_dir) / "plots"
    plots.mkdir(exist_ok=True)
    for old in plots.glob("*.png"):
        old.unlink()
    child = _fork() if parallel else None
    if child == 0:  # the child: the request plots, then out, whatever happens
        code = 1
        try:
            _request_plots(run_dir, plots, requests, summary)
            code = 0
        finally:
            os._exit(code)
    try:
        out = _step_plots(plots, num_gpu_blocks, _steps(run_dir, steps), summary, note)
    finally:  # the child is waited for also when reading the steps fails
        drawn = child is not None and _succeeded(child)
    if drawn:
        names = ("latency.png", "spec_acceptance.png", "pd.png")
        return out + [plots / n for n in names if (plots / n).is_file()]
    return out + _request_plots(run_dir, plots, requests, summary)


def _steps(
    run_dir: Path, steps: pd.DataFrame | StepRows | Callable[[], pd.DataFrame | StepRows] | None
) -> pd.DataFrame | StepRows:
    """The step rows ``steps`` gives: read when a function, ``steps.csv`` when None."""
    if steps is None:
        return pd.read_csv(Path(run_dir) / "steps.csv")
    return steps() if callable(steps) else steps


def _step_plots(
    plots: Path,
    num_gpu_blocks: int,
    steps: pd.DataFrame | StepRows,
    summary: dict[str, Any] | None,
    note: str,
) -> list[Path]:
    """The plots drawn from the steps (timeline, replicas), in order."""
    out = []
    end = float((summary or {}).get("sim_duration_s") or 0.0)
    if isinstance(steps, pd.DataFrame):
        binned = bin_steps(steps, num_gpu_blocks - 1, end)
    else:
        binned = steps.binned(num_gpu_blocks - 1, end)
    if binned is not None:
        out.append(plot_timeline(binned, summary, plots / "timeline.png", note))
        if len(binned.replicas) > 1:
            out.append(plot_replicas(binned, summary, plots / "replicas.png"))
    return out


def _request_plots(
    run_dir: Path, plots: Path, requests: pd.DataFrame, summary: dict[str, Any] | None
) -> list[Path]:
    """The plots drawn from the requests (and the run's ``spec_decode.csv``), in order."""
    out = [plot_latency(requests, plots / "latency.png", summary)]
    spec = Path(run_dir) / "spec_decode.csv"
    if spec.is_file():  # a run with speculative decoding
        from reports.spec_plot import plot_spec_acceptance

        drawn = plot_spec_acceptance(spec, summary, plots / "spec_acceptance.png")
        if drawn is not None:
            out.append(drawn)
    if summary is not None and "pd" in summary:  # a P/D run
        from reports.pd_plot import plot_pd

        drawn = plot_pd(requests, summary, plots / "pd.png")
        if drawn is not None:
            out.append(drawn)
    return out


def _fork() -> int | None:
    """``os.fork()``'s answer, or None where a process cannot fork."""
    if not hasattr(os, "fork"):
        return None
    try:
        return os.fork()
    except OSError:
        return None


def _succeeded(pid: int) -> bool:
    """Wait for child ``pid``; whether it exited with status 0."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return False
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
