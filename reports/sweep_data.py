"""A sweep's records as a table for plotting: ``sweep.csv`` plus the axes in ``sweep.yaml``.

Replications (seeds) of one grid cell are averaged; the spread is kept as min/max.
The first axis that takes more than one value is the x axis of the sweep plots; the
other varying axes make one line per combination of their values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from reports.axis_names import point_name, short_name, value_text


@dataclass
class SweepFrame:
    """The finished points of a sweep and how to plot them."""

    name: str
    rows: pd.DataFrame  # every sweep.csv row
    axes: list[str]  # every axis path, in spec order
    x: str  # the x axis (``point`` when no axis varies)
    series: list[str]  # the other varying axes (one line per combination)
    slo: dict[str, float] = field(default_factory=dict)  # the spec's SLOs (plan names)

    @property
    def ok(self) -> pd.DataFrame:
        """Rows of points that ran to the end."""
        return self.rows[self.rows["status"] == "ok"]

    def saturated(self) -> pd.Series:
        """Per row: the run's verdict says it is saturated, or could not show it steady
        (``undecided``): its latency is not meaningful."""
        # sim.records.verdict.SATURATED / UNDECIDED (reports reads files, imports nothing of sim)
        return self.rows["verdict"].isin(["saturated", "undecided"])

    def steady_rows(self) -> pd.DataFrame:
        """Ok rows of the grid cells whose every seed is steady (as the headline counts
        a value steady): the rows whose latency means something."""
        ok = self.ok.assign(_bad=self.saturated()[self.ok.index])
        bad_cell = ok.groupby(self.cell_keys(), sort=False, dropna=False)["_bad"].transform("any")
        return self.ok[~bad_cell.to_numpy()]

    def cell_keys(self) -> list[str]:
        return [self.x, *self.series]

    def x_is_numeric(self) -> bool:
        col = self.rows[self.x]
        return pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)

    def series_label(self, key: tuple) -> str:
        """``rate=8, router=prefix_aware`` (short names, :mod:`reports.axis_names`)."""
        return ", ".join(
            f"{short_name(s, self.axes)}={value_text(v)}" for s, v in zip(self.series, key)
        )

    def point_name(self, row: pd.Series) -> str:
        """A point's readable name from its axis values and seed (``rate=8, seed 0``)."""
        seed = row.get("seed")
        return point_name({a: row[a] for a in self.axes}, None if pd.isna(seed) else seed)


def load_sweep_frame(sweep_dir: Path) -> SweepFrame:
    """Read ``sweep.csv`` and ``sweep.yaml`` of a sweep directory (ValueError if missing)."""
    csv_path = sweep_dir / "sweep.csv"
    if not csv_path.is_file():
        raise ValueError(f"{sweep_dir}: not a sweep directory (no sweep.csv)")
    rows = pd.read_csv(csv_path, keep_default_na=True)
    meta_path = sweep_dir / "sweep.yaml"
    meta = yaml.safe_load(meta_path.read_text()) if meta_path.is_file() else {}
    spec = (meta or {}).get("spec") or {}
    axes = [a["path"] for a in spec.get("axes") or []]
    axes += [a["path"] for group in spec.get("zip") or [] for a in group]
    if not axes:  # no sweep.yaml: the columns between point_id and seed
        cols = list(rows.columns)
        axes = cols[cols.index("point_id") + 1 : cols.index("seed")]
    axes = [a for a in axes if a in rows.columns]
    zipped_followers = {a["path"] for group in spec.get("zip") or [] for a in group[1:]}
    varying = [a for a in axes if rows[a].nunique(dropna=False) > 1 and a not in zipped_followers]
    slo = spec.get("slo") or {}
    return SweepFrame(
        name=str(spec.get("name") or sweep_dir.name),
        rows=rows,
        axes=axes,
        x=varying[0] if varying else "point",
        series=varying[1:],
        slo={k: float(v) for k, v in slo.items() if v is not None},
    )


def aggregate(frame: SweepFrame, rows: pd.DataFrame, column: str) -> pd.DataFrame:
    """Mean, min and max of ``column`` over seeds, per grid cell (columns: keys + stats)."""
    keys = frame.cell_keys()
    data = rows[[*keys, column]].dropna(subset=[column])
    grouped = data.groupby(keys, sort=False, dropna=False)[column]
    return grouped.agg(["mean", "min", "max"]).reset_index()
