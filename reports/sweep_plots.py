"""Plots of a sweep, drawn from its ``sweep.csv`` (and the points' ``steps.csv``) alone.

Each line plot has the first varying axis on x and one line per combination of the
other varying axes; seeds are averaged and their min-max spread shaded. Points whose
verdict says saturated are left out of the latency lines and marked instead, since
their latency only measures how long the simulation ran. The plots of the grid's
cells (heatmap, KV usage box plots) are :mod:`reports.sweep_cell_plots`'s.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import NullLocator  # noqa: E402

from reports.axis_names import axis_label, axis_unit  # noqa: E402
from reports.figures import save_png  # noqa: E402
from reports.sweep_cell_plots import plot_heatmap, plot_kv_distribution  # noqa: E402
from reports.sweep_data import SweepFrame, aggregate, load_sweep_frame  # noqa: E402

_LEGEND = 9  # legend font size (points)


def _positions(frame: SweepFrame) -> dict:
    """x value -> plotting position (the value itself when numeric)."""
    values = list(dict.fromkeys(frame.rows[frame.x].tolist()))
    if frame.x_is_numeric():
        return {v: float(v) for v in values}
    return {v: float(i) for i, v in enumerate(values)}


def _setup_x(ax: plt.Axes, frame: SweepFrame) -> None:
    pos = _positions(frame)
    ax.set_xlabel(axis_label(frame.x))
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
    scale: float = 1.0,
) -> None:
    pos = _positions(frame)
    agg = aggregate(frame, rows, column)
    agg[["mean", "min", "max"]] *= scale
    for i, (label, grp) in enumerate(_groups(frame, agg)):
        grp = grp.assign(_x=grp[frame.x].map(pos)).sort_values("_x")
        name = " ".join(p for p in (suffix, label) if p) or "mean over seeds"
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
        label="not shown steady (latency left out)",
    )


def _save(fig: plt.Figure, path: Path) -> Path:
    """Lay ``fig`` out tight and write it to ``path`` (PNG); return ``path``."""
    fig.tight_layout()
    return save_png(fig, path)


def _metric_plot(
    frame: SweepFrame,
    columns: list[tuple[str, str, str]],
    ylabel: str,
    title: str,
    path: Path,
    scale: float = 1.0,
) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for column, ls, suffix in columns:
        _lines(ax, frame, frame.ok, column, ls=ls, suffix=suffix, scale=scale)
    values = pd.concat([frame.ok[c] for c, _, _ in columns if c in frame.ok])
    if values.notna().any() and (values.fillna(0) == 0).all():
        ax.text(0.5, 0.5, "0 at every point", transform=ax.transAxes, ha="center", va="center")
    _setup_x(ax, frame)
    ax.set(ylabel=ylabel, title=title)
    ax.set_ylim(bottom=0, top=max(ax.get_ylim()[1], 1e-9))
    ax.legend(fontsize=_LEGEND)
    return _save(fig, path)


def _mark_not_steady(ax: plt.Axes, frame: SweepFrame, column: str) -> None:
    """Red crosses on the line's points where some seed is not shown steady."""
    rows = frame.ok.assign(_bad=frame.saturated()[frame.ok.index])
    keys = frame.cell_keys()
    cells = rows.groupby(keys, sort=False, dropna=False).agg(
        bad=("_bad", "any"), y=(column, "mean")
    )
    bad = cells[cells["bad"]].reset_index()
    if bad.empty:
        return
    pos = _positions(frame)
    ax.plot(
        bad[frame.x].map(pos),
        bad["y"],
        "x",
        color="crimson",
        ms=9,
        mew=2,
        label="not shown steady (saturated or undecided)",
    )


def _mark_steady_limit(ax: plt.Axes, frame: SweepFrame) -> None:
    """One line along a numeric x: a vertical line at the last value before the first
    one not shown steady (where saturation starts)."""
    if frame.series or not frame.x_is_numeric():
        return
    ok = frame.ok
    steady = ok.groupby(frame.x, sort=True)["verdict"].apply(lambda v: (v == "steady").all())
    last = None
    for x, is_steady in steady.items():
        if not is_steady:
            break
        last = x
    if last is not None and not bool(steady.all()):
        unit = axis_unit(frame.x)
        label = f"steady up to {last:g}{' ' + unit if unit else ''}"
        ax.axvline(float(last), color="tab:green", ls="--", lw=1.2, label=label)


def plot_throughput(frame: SweepFrame, path: Path) -> Path:
    """Completions per second against the x axis: the measurement window's figure
    (warm-up and drain excluded) where sweep.csv has it, else the whole run's; points
    not shown steady crossed, the last steady value marked."""
    fig, ax = plt.subplots(figsize=(11, 4.2))
    column = "throughput_rps"
    if "window_throughput_rps" in frame.ok and frame.ok["window_throughput_rps"].notna().all():
        column = "window_throughput_rps"
    _lines(ax, frame, frame.ok, column, suffix="finished" if not frame.series else "")
    _mark_not_steady(ax, frame, column)
    _mark_steady_limit(ax, frame)
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
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=_LEGEND)
    return _save(fig, path)


def plot_latency(frame: SweepFrame, path: Path) -> Path:
    rows = frame.steady_rows()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric, name in zip(axes, ("ttft_s", "tpot_s"), ("TTFT", "TPOT")):
        for q, ls in (("p50", ":"), ("p90", "--"), ("p99", "-")):
            column = f"window_{metric}_{q}"
            if column not in rows or rows[column].isna().all():
                column = f"{metric}_{q}"  # a sweep from before the measurement window
            _lines(ax, frame, rows, column, ls=ls, suffix=q, scale=1e3)
        _mark_saturated(ax, frame)
        _setup_x(ax, frame)
        ax.set(ylabel="ms", title=f"{name} percentiles (points shown steady)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=_LEGEND)
    return _save(fig, path)


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
            "% of prompt tokens found in the cache",
            "Prefix-cache hit rate",
            plots / "prefix_cache.png",
            scale=100,
        ),
        _metric_plot(
            frame,
            [("kv_usage_mean", "-", "mean"), ("kv_usage_p99", "--", "p99")],
            "% of KV blocks in use",
            "KV cache usage",
            plots / "kv_usage.png",
            scale=100,
        ),
    ]
    if frame.series:
        out.append(plot_heatmap(frame, plots / "heatmap_preemptions.png"))
    dist = plot_kv_distribution(frame, sweep_dir, plots / "kv_usage_distribution.png")
    if dist is not None:
        out.append(dist)
    return out
