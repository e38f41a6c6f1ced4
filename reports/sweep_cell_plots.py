"""The sweep's plots of its grid cells, from ``sweep.csv`` (and the points'
``steps.csv``): a heatmap of a figure over the first two varying axes with the
saturated cells outlined, and box plots of each cell's per-step KV usage.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from reports.axis_names import axis_label, short_name, value_text  # noqa: E402
from reports.figures import save_png  # noqa: E402
from reports.sweep_data import SweepFrame  # noqa: E402

_MAX_BOXES = 40
"""Box plots drawn at most (the first cells)."""


def _kv_usage(point: Path) -> np.ndarray | None:
    """A point's per-step (or per-bucket, when thinned) KV usage from ``steps.csv`` or
    ``steps.parquet``; None when it wrote neither (``--steps none``) or it is unreadable."""
    try:
        if (point / "steps.csv").is_file():
            return pd.read_csv(point / "steps.csv", usecols=["kv_usage"])["kv_usage"].to_numpy()
        if (point / "steps.parquet").is_file():
            return pd.read_parquet(point / "steps.parquet", columns=["kv_usage"])[
                "kv_usage"
            ].to_numpy()
    except (OSError, ValueError, ImportError):
        return None
    return None


def plot_kv_distribution(frame: SweepFrame, sweep_dir: Path, path: Path) -> Path | None:
    """Box plots of per-step KV usage, one per grid cell (first seed), from steps.csv."""
    firsts = frame.ok.drop_duplicates(subset=frame.cell_keys()).head(_MAX_BOXES)
    data, labels = [], []
    for _, row in firsts.iterrows():
        point = sweep_dir / "points" / str(row["point_id"])
        usage = _kv_usage(point)
        if usage is not None:
            data.append(usage * 100)
            labels.append(
                ", ".join(
                    f"{short_name(k, frame.axes)}={value_text(row[k])}" for k in frame.cell_keys()
                )
            )
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(max(6.4, 0.45 * len(data) + 2), 3.8))
    ax.boxplot(data, whis=(1, 99), showfliers=False)
    ax.set_xticks(range(1, len(data) + 1), labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylim(bottom=0)
    ax.set(ylabel="% of KV blocks in use", title="KV usage per step (first seed; p1-p99 whiskers)")
    fig.tight_layout()
    return save_png(fig, path)


def plot_heatmap(frame: SweepFrame, path: Path, column: str = "preemptions_per_request") -> Path:
    """``column`` over the first two varying axes (mean over seeds and other axes);
    cells with no finished run are hatched, saturated cells labelled."""
    ykey, xkey = frame.x, frame.series[0]
    rows = frame.rows.assign(_sat=frame.saturated())
    ok = rows[rows["status"] == "ok"]
    yvals = list(dict.fromkeys(rows[ykey].tolist()))
    xvals = list(dict.fromkeys(rows[xkey].tolist()))
    grid = np.full((len(yvals), len(xvals)), np.nan)
    sat = np.zeros_like(grid, dtype=bool)
    for (yv, xv), grp in ok.groupby([ykey, xkey], sort=False):
        i, j = yvals.index(yv), xvals.index(xv)
        grid[i, j] = grp[column].mean()
        sat[i, j] = bool(grp["_sat"].any())
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(xvals) + 3), max(4, 0.5 * len(yvals) + 2)))
    ax.set_facecolor("#dddddd")
    im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
    fig.colorbar(im, ax=ax, label=column.replace("_", " "))
    finite = grid[np.isfinite(grid)]
    mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    for i in range(len(yvals)):
        for j in range(len(xvals)):
            if np.isnan(grid[i, j]):
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="//"))
                ax.text(j, i, "failed", ha="center", va="center", fontsize=7)
                continue
            text = f"{grid[i, j]:.3g}" + ("\nsaturated" if sat[i, j] else "")
            color = "k" if grid[i, j] > mid else "w"
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color=color)
    _draw_frontier(ax, sat)
    ax.set_xticks(range(len(xvals)), [value_text(v) for v in xvals])
    ax.set_yticks(range(len(yvals)), [value_text(v) for v in yvals])
    title = f"{column.replace('_', ' ')} (mean over seeds; red outline: saturated)"
    ax.set(xlabel=axis_label(xkey), ylabel=axis_label(ykey), title=title)
    fig.tight_layout()
    return save_png(fig, path)


def _draw_frontier(ax: plt.Axes, sat: np.ndarray) -> None:
    """Outline the saturated cells (the saturation frontier) in red."""
    rows, cols = sat.shape
    for i in range(rows):
        for j in range(cols):
            if not sat[i, j]:
                continue
            edges = (
                (j == 0 or not sat[i, j - 1], [j - 0.5, j - 0.5], [i - 0.5, i + 0.5]),
                (j == cols - 1 or not sat[i, j + 1], [j + 0.5, j + 0.5], [i - 0.5, i + 0.5]),
                (i == 0 or not sat[i - 1, j], [j - 0.5, j + 0.5], [i - 0.5, i - 0.5]),
                (i == rows - 1 or not sat[i + 1, j], [j - 0.5, j + 0.5], [i + 0.5, i + 0.5]),
            )
            for draw, xs, ys in edges:
                if draw:
                    ax.plot(xs, ys, color="red", lw=2)
