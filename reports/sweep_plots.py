"""Plots of a sweep, drawn from its ``sweep.csv`` (and the points' ``steps.csv``) alone.

Each line plot has the first varying axis on x and one line per combination of the
other varying axes; seeds are averaged and their min-max spread shaded. Points whose
verdict says saturated are left out of the latency lines and marked instead, since
their latency only measures how long the simulation ran.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import NullLocator  # noqa: E402

from reports.sweep_data import SweepFrame, aggregate, load_sweep_frame  # noqa: E402

_MAX_BOXES = 40


def _positions(frame: SweepFrame) -> dict:
    """x value -> plotting position (the value itself when numeric)."""
    values = list(dict.fromkeys(frame.rows[frame.x].tolist()))
    if frame.x_is_numeric():
        return {v: float(v) for v in values}
    return {v: float(i) for i, v in enumerate(values)}


def _setup_x(ax: plt.Axes, frame: SweepFrame) -> None:
    pos = _positions(frame)
    ax.set_xlabel(frame.x)
    if not frame.x_is_numeric():
        ax.set_xticks(list(pos.values()), [str(v) for v in pos])
        return
    xs = sorted(pos.values())
    if xs and xs[0] > 0 and xs[-1] / xs[0] >= 20:
        ax.set_xscale("log")
        ax.xaxis.set_minor_locator(NullLocator())
    if len(xs) <= 12:
        ax.set_xticks(xs, [f"{x:g}" for x in xs])


def _groups(frame: SweepFrame, agg: pd.DataFrame):
    """``(label, rows)`` per line: one per combination of the series axes."""
    if not frame.series:
        yield "", agg
        return
    for key, grp in agg.groupby(frame.series, sort=False, dropna=False):
        yield frame.series_label(key if isinstance(key, tuple) else (key,)), grp


def _lines(
    ax: plt.Axes,
    frame: SweepFrame,
    rows: pd.DataFrame,
    column: str,
    *,
    ls: str = "-",
    suffix: str = "",
) -> None:
    pos = _positions(frame)
    agg = aggregate(frame, rows, column)
    for i, (label, grp) in enumerate(_groups(frame, agg)):
        grp = grp.assign(_x=grp[frame.x].map(pos)).sort_values("_x")
        name = " ".join(p for p in (suffix, label) if p) or column
        ax.plot(grp["_x"], grp["mean"], marker="o", ms=3, ls=ls, color=f"C{i % 10}", label=name)
        if (grp["max"] > grp["min"]).any():
            ax.fill_between(grp["_x"], grp["min"], grp["max"], color=f"C{i % 10}", alpha=0.15)


def _mark_saturated(ax: plt.Axes, frame: SweepFrame) -> None:
    sat = frame.rows[frame.saturated()]
    if sat.empty:
        return
    pos = _positions(frame)
    xs = sorted({pos[v] for v in sat[frame.x]})
    ax.plot(
        xs,
        [1.0] * len(xs),
        "x",
        color="crimson",
        transform=ax.get_xaxis_transform(),
        clip_on=False,
        label="saturated (latency not shown)",
    )


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _metric_plot(
    frame: SweepFrame, columns: list[tuple[str, str, str]], ylabel: str, title: str, path: Path
) -> Path:
    fig, ax = plt.subplots(figsize=(8, 4))
    for column, ls, suffix in columns:
        _lines(ax, frame, frame.ok, column, ls=ls, suffix=suffix)
    _setup_x(ax, frame)
    ax.set(ylabel=ylabel, title=title)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_throughput(frame: SweepFrame, path: Path) -> Path:
    """Completions per second against the x axis: the measurement window's figure
    (warm-up and drain excluded) where sweep.csv has it, else the whole run's."""
    fig, ax = plt.subplots(figsize=(8, 4))
    column = "throughput_rps"
    if "window_throughput_rps" in frame.ok and frame.ok["window_throughput_rps"].notna().all():
        column = "window_throughput_rps"
    _lines(ax, frame, frame.ok, column, suffix="window" if column != "throughput_rps" else "")
    if frame.x.endswith("arrival.rate") and frame.x_is_numeric():
        xs = sorted(_positions(frame).values())
        ax.plot(xs, xs, color="grey", ls=":", label="offered load")
    _setup_x(ax, frame)
    ax.set(
        ylabel="finished requests / s",
        title="Throughput (measurement window)"
        if column != "throughput_rps"
        else "Throughput (whole run)",
    )
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_latency(frame: SweepFrame, path: Path) -> Path:
    rows = frame.ok[~frame.saturated()[frame.ok.index]]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric, name in zip(axes, ("ttft_s", "tpot_s"), ("TTFT", "TPOT")):
        for q, ls in (("p50", ":"), ("p90", "--"), ("p99", "-")):
            _lines(ax, frame, rows, f"{metric}_{q}", ls=ls, suffix=q)
        _mark_saturated(ax, frame)
        _setup_x(ax, frame)
        ax.set(ylabel="seconds", title=f"{name} percentiles")
        ax.legend(fontsize=6)
    return _save(fig, path)


def plot_kv_distribution(frame: SweepFrame, sweep_dir: Path, path: Path) -> Path | None:
    """Box plots of per-step KV usage, one per grid cell (first seed), from steps.csv."""
    firsts = frame.ok.drop_duplicates(subset=frame.cell_keys()).head(_MAX_BOXES)
    data, labels = [], []
    for _, row in firsts.iterrows():
        steps = sweep_dir / "points" / str(row["point_id"]) / "steps.csv"
        if steps.is_file():
            data.append(pd.read_csv(steps, usecols=["kv_usage"])["kv_usage"].to_numpy())
            labels.append(", ".join(f"{k.rsplit('.', 1)[-1]}={row[k]}" for k in frame.cell_keys()))
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(data) + 2), 4.5))
    ax.boxplot(data, whis=(1, 99), showfliers=False)
    ax.set_xticks(range(1, len(data) + 1), labels, rotation=60, ha="right", fontsize=7)
    ax.set(ylabel="KV usage per step", title="KV usage distribution (p1-p99 whiskers)")
    return _save(fig, path)


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
    fig.colorbar(im, ax=ax, label=column)
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
    ax.set_xticks(range(len(xvals)), [str(v) for v in xvals])
    ax.set_yticks(range(len(yvals)), [str(v) for v in yvals])
    ax.set(xlabel=xkey, ylabel=ykey, title=f"{column} (mean over seeds)")
    return _save(fig, path)


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


def render_sweep_plots(sweep_dir: Path) -> list[Path]:
    """Write ``plots/*.png`` for a sweep directory; return the files written."""
    frame = load_sweep_frame(sweep_dir)
    plots = sweep_dir / "plots"
    plots.mkdir(exist_ok=True)
    for old in plots.glob("*.png"):
        old.unlink()
    if frame.ok.empty:
        return []
    out = [
        plot_throughput(frame, plots / "throughput.png"),
        plot_latency(frame, plots / "latency.png"),
        _metric_plot(
            frame,
            [("preemptions_per_request", "-", "")],
            "preemptions per request",
            "Preemption rate",
            plots / "preemptions.png",
        ),
        _metric_plot(
            frame,
            [("prefix_cache_hit_rate", "-", "")],
            "hit tokens / queried tokens",
            "Prefix-cache hit rate",
            plots / "prefix_cache.png",
        ),
        _metric_plot(
            frame,
            [("kv_usage_mean", "-", "mean"), ("kv_usage_p99", "--", "p99")],
            "fraction of KV blocks in use",
            "KV usage",
            plots / "kv_usage.png",
        ),
    ]
    if frame.series:
        out.append(plot_heatmap(frame, plots / "heatmap_preemptions.png"))
    dist = plot_kv_distribution(frame, sweep_dir, plots / "kv_usage_distribution.png")
    if dist is not None:
        out.append(dist)
    return out
