"""The split map of a P/D ``min_replicas`` plan: every prefill:decode split probed.

Prefill instances across, decode instances up; a passing split is a green dot, a
failing one a red cross, the answer a star. Splits on the dashed line have one
instance fewer than the answer: by monotonicity (more instances never fail where
fewer pass) each is probed or lies below a probed failure, so none passes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from reports.figures import save_png  # noqa: E402

CAPTION = (
    "Each prefill:decode split probed: passed (green dot) or failed (red cross) at the "
    "plan's rate; the answer (star), the fewest instances meeting the SLOs; on the dashed "
    "line, splits with one instance fewer, none of which passes."
)


def plot_split_map(doc: dict[str, Any], path: Path) -> Path:
    """Write the split map of ``plan.json``'s ``doc`` to ``path`` (PNG)."""
    limits = doc["limits"]
    fig, ax = plt.subplots(figsize=(8.0, 5.2))
    for passed, style in ((True, {"marker": "o", "color": "tab:green"}), (False, {})):
        xs = [p["split"]["prefill"] for p in doc["probes"] if bool(p["passed"]) == passed]
        ys = [p["split"]["decode"] for p in doc["probes"] if bool(p["passed"]) == passed]
        if passed:
            ax.scatter(xs, ys, s=60, label="passes", **style)
        else:
            ax.scatter(xs, ys, s=70, marker="x", color="tab:red", label="fails")
    split, below = doc.get("split"), doc["bracket"]["first_fail"]
    if split is not None:
        ax.scatter(
            [split["prefill"]],
            [split["decode"]],
            s=260,
            marker="*",
            color="gold",
            edgecolors="black",
            zorder=3,
            label=f"answer: {split['prefill']} + {split['decode']} = {doc['answer']:g}",
        )
    if split is not None and below is not None:
        xs = [0.5, limits["prefill"] + 0.5]  # the line P + D = below, across the map
        ax.plot(xs, [below - x for x in xs], ls="--", color="gray", label=f"{below:g} instances")
    ax.set_xlim(0.5, limits["prefill"] + 0.5)
    ax.set_ylim(0.5, limits["decode"] + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("prefill instances")
    ax.set_ylabel("decode instances")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_png(fig, path)
