"""``spec_acceptance.png``: speculative decoding's acceptance over a run's time, from
its ``spec_decode.csv`` (one row per step that verified drafts: ``replica``,
``end_s``, ``num_drafts``, ``num_draft_tokens``, ``num_accepted_tokens``).

Per time bin (all replicas together): the acceptance rate (accepted over draft
tokens), the whole run's as a dashed line; the measurement window shaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from reports.figures import save_png  # noqa: E402

MAX_BINS = 200
"""Time bins at most."""


def plot_spec_acceptance(csv_path: Path, summary: dict[str, Any] | None, path: Path) -> Path | None:
    """Draw the plot into ``path``; None (nothing drawn) when the file has no rows."""
    rows = pd.read_csv(csv_path)
    if rows.empty:
        return None
    end_s = rows["end_s"].to_numpy(dtype=np.float64)
    end = max(float((summary or {}).get("sim_duration_s") or 0.0), float(end_s.max()), 1e-9)
    n = int(min(MAX_BINS, max(1, len(rows) // 20)))
    edges = np.linspace(0.0, end, n + 1)
    bins = np.clip((end_s / end * n).astype(np.int64), 0, n - 1)
    tokens = np.bincount(bins, rows["num_draft_tokens"].to_numpy(np.float64), n)
    accepted = np.bincount(bins, rows["num_accepted_tokens"].to_numpy(np.float64), n)
    mid = (edges[:-1] + edges[1:]) / 2
    keep = tokens > 0
    fig, ax = plt.subplots(figsize=(10, 3.6))
    ax.plot(mid[keep], accepted[keep] / tokens[keep], color="tab:blue", label="acceptance rate")
    ax.set_ylim(0, 1)
    ax.set_ylabel("accepted / draft tokens")
    ax.set_xlabel("simulated time (s)")
    block = (summary or {}).get("spec_decode") or {}
    if "acceptance_rate" in block:
        ax.axhline(block["acceptance_rate"], color="gray", ls="--", lw=1, label="whole run")
    window = (summary or {}).get("window") or {}
    if window.get("end_s", 0) > window.get("start_s", 0):
        ax.axvspan(window["start_s"], window["end_s"], color="#2ca02c", alpha=0.1, lw=0)
    ax.set_title(
        f"Speculative decoding: {block.get('method', '?')}, "
        f"k = {block.get('num_speculative_tokens', '?')}",
        fontsize=12,
    )
    ax.legend(fontsize=9, loc="lower right")
    fig.tight_layout()
    return save_png(fig, path)
