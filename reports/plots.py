"""Plots of one run, drawn from its ``steps.csv`` and ``requests.csv`` alone."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

_MAX_POINTS = 4000


def _thin(df: pd.DataFrame) -> pd.DataFrame:
    """At most ~_MAX_POINTS rows, evenly spaced, for line plots of long runs."""
    if len(df) <= _MAX_POINTS:
        return df
    return df.iloc[:: int(np.ceil(len(df) / _MAX_POINTS))]


def _legend(ax: plt.Axes) -> None:
    """A legend when the axes has labelled lines (none for a run without rows)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def plot_kv_usage(steps: pd.DataFrame, num_gpu_blocks: int, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for replica, df in steps.groupby("replica"):
        df = _thin(df)
        in_use = num_gpu_blocks - 1 - df["num_free_blocks"]
        cached_free = df.get("num_cached_free_blocks", pd.Series(0, index=df.index))
        label = f" (replica {replica})" if steps["replica"].nunique() > 1 else ""
        ax.stackplot(
            df["start_s"],
            in_use,
            cached_free,
            labels=[f"in use{label}", f"cached, free{label}"],
            alpha=0.8,
        )
    ax.axhline(num_gpu_blocks - 1, color="k", lw=0.8, ls="--", label="usable blocks")
    ax.set(xlabel="time (s)", ylabel="KV blocks", title="KV cache blocks over time")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_preemptions(steps: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 3))
    for replica, df in steps.groupby("replica"):
        ax.plot(df["start_s"], df["num_preempted"].cumsum(), label=f"replica {replica}")
    ax.set(xlabel="time (s)", ylabel="preemptions (cumulative)", title="Preemptions over time")
    _legend(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_queues(steps: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 3))
    for replica, df in steps.groupby("replica"):
        df = _thin(df)
        ax.plot(df["start_s"], df["num_running"], label=f"running (replica {replica})")
        ax.plot(df["start_s"], df["num_waiting"], label=f"waiting (replica {replica})")
    ax.set(xlabel="time (s)", ylabel="requests", title="Running and waiting requests")
    _legend(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_latency(requests: pd.DataFrame, path: Path) -> None:
    ttft = requests["first_token_s"] - requests["arrival_s"]
    e2e = requests["finish_s"] - requests["arrival_s"]
    multi = requests["output_tokens"] > 1
    tpot = (requests["finish_s"] - requests["first_token_s"])[multi] / (
        requests["output_tokens"][multi] - 1
    )
    fig, axes = plt.subplots(1, 3, figsize=(10, 3))
    for ax, values, name in zip(axes, (ttft, tpot, e2e), ("TTFT", "TPOT", "E2E latency")):
        if len(values):
            spread = float(values.max() - values.min())
            # Equal values (a constant step time) would make 50 bins of width ~0 fail.
            bins = 50 if spread > 1e-9 * max(abs(float(values.max())), 1e-12) else 1
            ax.hist(values, bins=bins, color="tab:blue", alpha=0.8)
            for q, ls in ((0.5, "-"), (0.99, "--")):
                ax.axvline(values.quantile(q), color="k", ls=ls, lw=0.8, label=f"p{int(q * 100)}")
            ax.legend(fontsize=8)
        ax.set(xlabel="seconds", title=name)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render_run_plots(
    run_dir: Path,
    num_gpu_blocks: int,
    steps: pd.DataFrame | None = None,
    requests: pd.DataFrame | None = None,
) -> list[Path]:
    """Write ``plots/*.png`` for a run directory; return the files written.

    ``steps`` / ``requests``: the rows to plot (e.g. checked ones from
    :func:`reports.run_records.read_run_records`); None reads ``steps.csv`` /
    ``requests.csv`` as they are. Empty frames give empty panels, without warnings.
    """
    plots = run_dir / "plots"
    plots.mkdir(exist_ok=True)
    if steps is None:
        steps = pd.read_csv(run_dir / "steps.csv")
    if requests is None:
        requests = pd.read_csv(run_dir / "requests.csv")
    out = [
        plots / "kv_usage.png",
        plots / "preemptions.png",
        plots / "queues.png",
        plots / "latency.png",
    ]
    plot_kv_usage(steps, num_gpu_blocks, out[0])
    plot_preemptions(steps, out[1])
    plot_queues(steps, out[2])
    plot_latency(requests, out[3])
    return out
