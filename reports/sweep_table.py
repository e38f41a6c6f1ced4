"""A sweep's results as an operator reads them: the headline (where it stops being
steady, the best point) and one row per point in ms, % and req/s, shared by the HTML
report and the table ``kvsim sweep`` prints.

Figures are the measurement window's (``window_*`` columns of ``sweep.csv``), the
whole run's where a sweep predates the window. Latencies of points not shown steady
(saturated or undecided) are left out: they only measure how long the run was. With
SLOs in the spec (``slo:``, the plan's names), a point meets them when it is steady
and every bound holds; a grid cell when every seed's point does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
from rich.markup import escape
from rich.table import Table

from reports.axis_names import axis_label, axis_unit, point_name, value_text
from reports.plan_table import bounds_text, miss_text
from reports.sweep_data import SweepFrame

SLO_COLUMNS = {
    "ttft_mean_s": ("window_ttft_s_mean", "ttft_s_mean"),
    "ttft_p90_s": ("window_ttft_s_p90", "ttft_s_p90"),
    "tpot_mean_s": ("window_tpot_s_mean", "tpot_s_mean"),
    "tpot_p99_s": ("window_tpot_s_p99", "tpot_s_p99"),
    "e2e_p99_s": ("window_e2e_s_p99", "e2e_s_p99"),
    "max_preemptions_per_request": ("window_preemptions_per_request", "preemptions_per_request"),
}
"""Each SLO (``sim.plan.spec`` names) -> its ``sweep.csv`` column, window then whole run."""


def _ms(v: float) -> str:
    return f"{v * 1e3:,.1f}"


def _pct(v: float) -> str:
    return f"{v:.1%}"


@dataclass(frozen=True)
class Column:
    """One results column: header, ``sweep.csv`` columns (first present wins), format;
    ``latency``: blank for points not shown steady; ``terminal``: printed by kvsim sweep."""

    header: str
    sources: tuple[str, ...]
    fmt: Callable[[float], str]
    latency: bool = False
    terminal: bool = True


COLUMNS = [
    Column("offered req/s", ("window_offered_rps",), lambda v: f"{v:,.2f}", terminal=False),
    Column("finished req/s", ("window_throughput_rps", "throughput_rps"), lambda v: f"{v:,.2f}"),
    Column("TTFT p90 (ms)", ("window_ttft_s_p90", "ttft_s_p90"), _ms, latency=True),
    Column("TPOT p90 (ms)", ("window_tpot_s_p90", "tpot_s_p90"), _ms, latency=True),
    Column("E2E p99 (ms)", ("window_e2e_s_p99", "e2e_s_p99"), _ms, latency=True),
    Column(
        "preempt / request",
        ("window_preemptions_per_request", "preemptions_per_request"),
        lambda v: f"{v:.3f}",
    ),
    Column("prefix hits", ("prefix_cache_hit_rate",), _pct, terminal=False),
    Column("KV mean", ("kv_usage_mean",), _pct),
    Column("KV blocks", ("num_gpu_blocks",), lambda v: f"{int(v):,}", terminal=False),
]


def _value(row: pd.Series, sources: tuple[str, ...]) -> float | None:
    for col in sources:
        v = row.get(col)
        if v is not None and not pd.isna(v) and v != "":
            try:
                return float(v)
            except (TypeError, ValueError):
                return None
    return None


def slo_failures(frame: SweepFrame, row: pd.Series) -> list[str]:
    """Why a point misses the spec's SLOs (``[]``: it meets them, or there are none)."""
    if not frame.slo:
        return []
    if row.get("status") != "ok":
        return [str(row.get("status"))]
    if row.get("verdict") != "steady":
        return [f"{row.get('verdict')}"]
    out = []
    for name, bound in frame.slo.items():
        value = _value(row, SLO_COLUMNS[name])
        if value is None:
            out.append(f"{name}: no figure")
        elif value > bound:
            out.append(miss_text(name, value, bound))
    return out


@dataclass
class PointRow:
    """One point, ready to print: ``cells`` follow :data:`COLUMNS`."""

    name: str  # axis values and seed: ``rate=8, seed 0``
    cell: str  # axis values only: ``rate=8``
    point_id: str
    seed: str
    status: str
    verdict: str
    cells: list[str]
    slo: str  # "meets", "misses: ...", or "" without SLOs
    error: str


def point_rows(frame: SweepFrame) -> list[PointRow]:
    """Every point of the sweep in point order."""
    out = []
    for _, row in frame.rows.iterrows():
        status = str(row.get("status", ""))
        verdict = str(row.get("verdict")) if status == "ok" else status
        steady = status == "ok" and verdict == "steady"
        cells = []
        for col in COLUMNS:
            value = _value(row, col.sources) if status == "ok" else None
            hidden = col.latency and not steady
            cells.append("-" if value is None or hidden else col.fmt(value))
        misses = slo_failures(frame, row)
        slo = ("misses: " + "; ".join(misses) if misses else "meets") if frame.slo else ""
        err = row.get("error")
        seed = row.get("seed")
        out.append(
            PointRow(
                name=frame.point_name(row),
                cell=point_name({a: row[a] for a in frame.axes}),
                point_id=str(row.get("point_id", "")),
                seed="" if pd.isna(seed) else value_text(seed),
                status=status,
                verdict=verdict,
                cells=cells,
                slo=slo,
                error="" if err is None or pd.isna(err) else str(err),
            )
        )
    return out


def _with_unit(x: float | str, unit: str) -> str:
    text = value_text(x)
    return f"{text} {unit}" if unit and not isinstance(x, str) else text


def _steady_range(xs: list, steady: list[bool], name: str, unit: str) -> str:
    """Where along the x axis the points are steady, in words."""
    good = [x for x, s in zip(xs, steady) if s]
    bad = [x for x, s in zip(xs, steady) if not s]

    def u(x: float | str) -> str:
        return _with_unit(x, unit)

    if not bad:
        return f"steady at every {name} tried ({u(xs[0])} to {u(xs[-1])})"
    if not good:
        return f"not shown steady at any {name} tried ({u(xs[0])} to {u(xs[-1])})"
    k = len(good)
    if steady[:k] == [True] * k:
        return f"steady up to {u(good[-1])}; not shown steady from {u(bad[0])}"
    if steady[-k:] == [True] * k:
        return f"steady from {u(good[0])}; not shown steady at {u(bad[-1])} or below"
    shown = ", ".join(value_text(x) for x in good)
    return f"steady at {shown}{' ' + unit if unit else ''}; not at the others"


def steady_lines(frame: SweepFrame) -> list[str]:
    """Per line of the plots: where along x every seed's point is steady."""
    ok = frame.ok
    if ok.empty or frame.x == "point":
        return []
    name = axis_label(frame.x).split(" (")[0]
    unit = axis_unit(frame.x)
    lines = []
    groups = ok.groupby(frame.series, sort=True) if frame.series else [((), ok)]
    for key, grp in groups:
        steady = grp.groupby(frame.x, sort=True)["verdict"].apply(lambda v: (v == "steady").all())
        label = frame.series_label(key if isinstance(key, tuple) else (key,))
        text = _steady_range(list(steady.index), [bool(s) for s in steady], name, unit)
        lines.append(f"{label}: {text}" if label else text)
    return lines


def _cell_name(frame: SweepFrame, key: tuple) -> str:
    if frame.x == "point":
        return f"point {value_text(key[0])}"
    return point_name(dict(zip(frame.cell_keys(), key)))


def best_line(frame: SweepFrame) -> str:
    """The best grid cell: highest finished rate among cells meeting the SLOs (every
    seed), or without SLOs among steady cells; "" when the sweep has no ok point or
    no throughput figures."""
    ok = frame.ok
    if ok.empty:
        return ""
    keys = frame.cell_keys()
    rows = ok.assign(
        _good=[not slo_failures(frame, r) and r["verdict"] == "steady" for _, r in ok.iterrows()],
        _rate=[_value(r, COLUMNS[1].sources) for _, r in ok.iterrows()],
    )
    if rows["_rate"].isna().all():
        return ""  # no throughput figures (a hand-made sweep.csv)
    cells = rows.groupby(keys, sort=False, dropna=False).agg(
        good=("_good", "all"), rate=("_rate", "mean")
    )
    good = cells[cells["good"]]
    slo = bounds_text(frame.slo)
    if good.empty:
        return f"no point meets the SLOs ({slo})" if slo else "no point is steady"
    index = good["rate"].idxmax()
    rate = float(good["rate"].max())
    key = index if isinstance(index, tuple) else (index,)
    seeds = rows[(rows[keys] == pd.Series(key, index=keys)).all(axis=1)]
    what = f"best point meeting the SLOs ({slo})" if slo else "highest steady throughput"
    parts = []
    for label, cols in (("TTFT p90", COLUMNS[2].sources), ("TPOT p90", COLUMNS[3].sources)):
        values = [v for _, r in seeds.iterrows() if (v := _value(r, cols)) is not None]
        if values:
            parts.append(f"{label} {_ms(max(values))} ms")
    worst = "worst seed: " if len(seeds) > 1 else ""
    lat = f"; {worst}{', '.join(parts)}" if parts else ""
    return f"{what}: {_cell_name(frame, key)} ({rate:,.2f} req/s finished{lat})"


def headline_lines(frame: SweepFrame) -> list[str]:
    """The report's headline: where each line is steady, then the best point."""
    best = best_line(frame)
    return [*steady_lines(frame), *([best] if best else [])]


TERMINAL_ROWS = 40
"""Points ``kvsim sweep`` prints (the rest are in sweep.csv and report.html)."""


def terminal_table(frame: SweepFrame, max_rows: int = TERMINAL_ROWS) -> Table:
    """The results table ``kvsim sweep`` prints at the end (rich), first ``max_rows``
    points."""
    table = Table(title=f"kvsim sweep: {frame.name}", title_justify="left")
    shown = [c for c in COLUMNS if c.terminal]
    table.add_column("point")
    table.add_column("verdict")
    for col in shown:
        table.add_column(col.header, justify="right")
    if frame.slo:
        table.add_column("SLOs")
    table.add_column("id", style="dim")
    rows = point_rows(frame)
    style = {"steady": "green", "saturated": "red", "undecided": "yellow"}
    for r in rows[:max_rows]:
        cells = [c for c, col in zip(r.cells, COLUMNS) if col.terminal]
        verdict = f"[{style.get(r.verdict, 'red')}]{escape(r.verdict)}[/]"
        extra = [escape(r.slo)] if frame.slo else []
        table.add_row(escape(r.name), verdict, *cells, *extra, r.point_id)
    if len(rows) > max_rows:
        table.caption = f"{len(rows) - max_rows} more points in sweep.csv and report.html"
    return table
