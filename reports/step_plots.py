"""The plots of a run's steps: ``timeline.png`` (KV cache usage, running and waiting
requests and preemptions on one shared time axis, a cluster's replicas summed, KV
usage their mean) and ``replicas.png`` (small multiples, one row per replica), the
measurement window shaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from reports.figures import measurement_window, save_png, shade_window  # noqa: E402
from reports.step_bins import BinnedSteps  # noqa: E402

MAX_REPLICA_ROWS = 16
"""Replicas drawn in ``replicas.png`` (the first ones, by id)."""


def _legend_above(ax: plt.Axes, ncol: int) -> None:
    """The axes' legend in one row above it, clear of the data."""
    ax.legend(
        loc="lower left",
        bbox_to_anchor=(0, 1.0),
        ncol=ncol,
        fontsize=9,
        frameon=False,
        borderaxespad=0.2,
    )


def plot_timeline(
    binned: BinnedSteps, summary: dict[str, Any] | None, path: Path, note: str = ""
) -> Path:
    """KV usage, requests and preemptions over time, all replicas together."""
    x = binned.centers
    n = len(binned.replicas)
    kv = np.mean(binned.kv, axis=0) * 100
    kv_max = np.max(binned.kv_max, axis=0) * 100
    cached = np.mean(binned.cached_free, axis=0) * 100
    running = np.sum(binned.running, axis=0)
    waiting = np.sum(binned.waiting, axis=0)
    preempted = np.sum(binned.preempted, axis=0)
    window = measurement_window(summary)
    fig, axes = plt.subplots(
        3, 1, figsize=(11, 7.2), sharex=True, gridspec_kw={"height_ratios": [1.3, 1, 0.7]}
    )
    who = f"{n} replicas: KV usage averaged, requests summed" if n > 1 else "one replica"
    fig.suptitle(f"Timeline ({who}){note}", fontsize=12)
    ax = axes[0]
    shade_window(ax, window, label=True)
    ax.fill_between(x, 0, kv, color="tab:blue", alpha=0.75, lw=0, label="in use (mean per bin)")
    ax.fill_between(
        x, kv, kv + cached, color="tab:blue", alpha=0.2, lw=0, label="cached, free (reusable)"
    )
    ax.plot(x, kv_max, color="navy", lw=0.7, label="in use (max per bin)")
    ax.set(ylabel="KV cache (% of blocks)", ylim=(0, 105))
    ax.axhline(100, color="k", lw=0.8, ls="--")
    _legend_above(ax, ncol=4)
    ax = axes[1]
    shade_window(ax, window)
    ax.plot(x, running, color="tab:blue", lw=1.2, label="running")
    ax.fill_between(x, 0, waiting, color="tab:red", alpha=0.3, lw=0)
    ax.plot(x, waiting, color="tab:red", lw=1.2, label="waiting")
    ax.set(ylabel="requests")
    ax.set_ylim(bottom=0)
    _legend_above(ax, ncol=2)
    ax = axes[2]
    shade_window(ax, window)
    total = int(preempted.sum())
    if total:
        ax.bar(x, preempted, width=binned.width_s, color="tab:purple", lw=0)
        ax.set_title(f"{total:,} preemptions", fontsize=9, loc="right")
    else:
        ax.text(0.5, 0.5, "no preemptions", transform=ax.transAxes, ha="center", va="center")
        ax.set_yticks([])
    ax.set(ylabel=f"preemptions\nper {binned.width_s:.3g} s", xlabel="simulated time (s)")
    ax.set_xlim(binned.edges[0], binned.edges[-1])
    fig.tight_layout()
    return save_png(fig, path)


def plot_replicas(binned: BinnedSteps, summary: dict[str, Any] | None, path: Path) -> Path:
    """Small multiples: per replica, KV usage and running/waiting on shared axes."""
    shown = binned.replicas[:MAX_REPLICA_ROWS]
    rows = len(shown)
    x = binned.centers
    window = measurement_window(summary)
    fig, axes = plt.subplots(
        rows, 2, figsize=(11, 1.35 * rows + 1.1), sharex=True, sharey="col", squeeze=False
    )
    more = len(binned.replicas) - rows
    extra = f" (first {rows} of {len(binned.replicas)})" if more > 0 else ""
    fig.suptitle(f"Per replica{extra}", fontsize=12)
    for i, replica in enumerate(shown):
        kv_ax, q_ax = axes[i]
        shade_window(kv_ax, window)
        shade_window(q_ax, window)
        kv_ax.fill_between(x, 0, binned.kv[i] * 100, color="tab:blue", alpha=0.75, lw=0)
        kv_ax.set_ylim(0, 105)
        kv_ax.set_ylabel(f"replica {replica}\nKV %", fontsize=9)
        q_ax.plot(x, binned.running[i], color="tab:blue", lw=1, label="running")
        q_ax.plot(x, binned.waiting[i], color="tab:red", lw=1, label="waiting")
        q_ax.set_ylabel("requests", fontsize=9)
        q_ax.set_ylim(bottom=0)
    axes[0, 0].set_title("KV cache in use (% of blocks)", fontsize=10)
    axes[0, 1].set_title("running and waiting requests", fontsize=10)
    axes[0, 1].legend(loc="upper right", fontsize=8, ncol=2)
    for ax in axes[-1]:
        ax.set_xlabel("simulated time (s)")
    axes[0, 0].set_xlim(binned.edges[0], binned.edges[-1])
    fig.tight_layout()
    return save_png(fig, path)
