"""``pd.png``: a P/D run's two pools and where its TTFT goes.

Left: each instance's busy share of the run (prefill instances, then decode ones,
from summary.json's ``pd`` block). Right: the TTFT split of requests.csv's P/D
columns (prefill queue, prefill, transfer, decode queue), mean and p90 of each part
over all finished requests, stacked (the stack of means is the mean TTFT).
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

PARTS = (
    ("prefill_queue_s", "prefill queue", "#c7c7c7"),
    ("prefill_s", "prefill", "tab:orange"),
    ("transfer_s", "KV transfer", "tab:red"),
    ("decode_queue_s", "decode queue", "tab:blue"),
)


def plot_pd(requests: pd.DataFrame, summary: dict[str, Any], path: Path) -> Path | None:
    """Draw the plot into ``path``; None (nothing drawn) without the P/D columns."""
    block = summary.get("pd")
    if not block or any(col not in requests for col, _, _ in PARTS):
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8), width_ratios=(3, 2))
    busy_p = list(block["prefill"]["utilization"])
    busy_d = list(block["decode"]["utilization"])
    x = np.arange(len(busy_p) + len(busy_d))
    left.bar(x[: len(busy_p)], busy_p, color="tab:orange", label="prefill")
    left.bar(x[len(busy_p) :], busy_d, color="tab:blue", label="decode")
    left.set_xticks(
        x, [f"P{i}" for i in range(len(busy_p))] + [f"D{i}" for i in range(len(busy_d))]
    )
    left.set_ylim(0, 1)
    left.set_ylabel("busy share of the run")
    left.set_title("Instances: time in steps that scheduled tokens", fontsize=11)
    left.legend(fontsize=9)
    bottom = np.zeros(2)
    for col, label, color in PARTS:
        values = requests[col].to_numpy(dtype=np.float64) * 1e3
        heights = np.array([values.mean(), np.percentile(values, 90)]) if len(values) else bottom
        right.bar([0, 1], heights, bottom=bottom, color=color, label=label)
        bottom = bottom + heights
    right.set_xticks([0, 1], ["mean", "p90 of each part"])
    right.set_ylabel("ms")
    xfer = block["transfers"]
    right.set_title(
        f"TTFT split; {xfer['count']:,} KV reads, {xfer['bytes'] / 1e9:,.2f} GB "
        f"at {block['kv_transfer_gbps']:g} GB/s",
        fontsize=11,
    )
    right.legend(fontsize=9)
    fig.tight_layout()
    return save_png(fig, path)
