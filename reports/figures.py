"""What kvsim's PNG plots share: saving a figure (100 dpi) and a run's measurement
window (``summary["window"]``) as a time span to shade.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.layout_engine import PlaceHolderLayoutEngine  # noqa: E402

DPI = 100
"""Dots per inch of every PNG."""
WINDOW_COLOR = "#2ca02c"
"""The measurement window's shade."""


def save_png(fig: plt.Figure, path: Path, dpi: int = DPI, **savefig: Any) -> Path:
    """Write ``fig`` to ``path`` as a PNG at ``dpi`` and close it; return ``path``.

    A figure laid out once by ``fig.tight_layout()`` is saved with that layout and
    drawn once: ``tight_layout`` leaves a do-nothing layout engine behind, and
    ``savefig`` draws a figure that has one twice (a layout pass, then the PNG; the
    same pixels, about 0.04 s more for the latency plot).
    """
    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        fig.set_layout_engine(None)
    fig.savefig(path, dpi=dpi, **savefig)
    plt.close(fig)
    return path


def warm_up() -> None:
    """Draw a small throwaway figure (titles, a legend, a line, a histogram, a tight
    layout, a PNG in memory): the fonts load and matplotlib's caches fill, which the
    first real figure of a process would otherwise pay for (about 0.04 s of a
    20,000-request run's latency plot, measured once in process). A process that draws
    after it writes the same PNG bytes (``tests/test_figures.py``); the report's worker
    calls it while the run runs."""
    fig, axes = plt.subplots(1, 2, figsize=(3, 2))
    axes[0].plot([0, 1], [0, 1], label="w")
    axes[0].legend(fontsize=9)
    axes[0].set_title("w", fontsize=10)
    axes[1].hist([1.0, 2.0, 3.0], bins=3, histtype="stepfilled")
    fig.suptitle("w", fontsize=12)
    fig.tight_layout()
    save_png(fig, io.BytesIO(), format="png")  # type: ignore[arg-type]


def measurement_window(summary: dict[str, Any] | None) -> tuple[float, float] | None:
    """``(start_s, end_s)`` of the summary's measurement window (simulated seconds), or
    None when it has none (or an empty one)."""
    window = (summary or {}).get("window")
    if isinstance(window, dict) and window.get("end_s", 0) > window.get("start_s", 0):
        return float(window["start_s"]), float(window["end_s"])
    return None


def shade_window(ax: plt.Axes, window: tuple[float, float] | None, label: bool = False) -> None:
    """Shade the measurement window on ``ax`` (nothing without one); ``label``: name it
    in the legend."""
    if window is not None:
        ax.axvspan(
            *window,
            color=WINDOW_COLOR,
            alpha=0.1,
            lw=0,
            label="measurement window" if label else None,
        )
