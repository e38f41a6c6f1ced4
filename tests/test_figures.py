"""reports.figures.save_png: a figure laid out by tight_layout is drawn once, and its
PNG is the one savefig writes."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from reports.figures import save_png  # noqa: E402


def _figure() -> Figure:
    fig, axes = plt.subplots(1, 2, figsize=(6, 2.5))
    for i, ax in enumerate(axes):
        ax.plot([0, 1, 2], [i, 3 * i, 1], label=f"series {i}")
        ax.set(xlabel="seconds", ylabel="requests", title=f"panel {i}")
        ax.legend()
    fig.suptitle("a figure")
    fig.tight_layout()
    return fig


def _count_draws(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    draw = Figure.draw

    def counted(self: Figure, renderer: object) -> None:
        calls.append(1)
        draw(self, renderer)

    monkeypatch.setattr(Figure, "draw", counted)
    return calls


def test_save_png_draws_a_tight_figure_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = _count_draws(monkeypatch)
    fig = _figure()
    out = save_png(fig, tmp_path / "a.png")
    assert out == tmp_path / "a.png" and out.stat().st_size > 0
    assert len(calls) == 1
    assert not plt.fignum_exists(fig.number)  # closed


def test_save_png_writes_what_savefig_writes(tmp_path: Path) -> None:
    plain = _figure()
    plain.savefig(tmp_path / "plain.png", dpi=100)  # the layout pass, then the PNG
    plt.close(plain)
    save_png(_figure(), tmp_path / "once.png")
    assert (tmp_path / "once.png").read_bytes() == (tmp_path / "plain.png").read_bytes()


def test_save_png_keeps_a_real_layout_engine(tmp_path: Path) -> None:
    fig, ax = plt.subplots(layout="constrained")
    ax.plot([0, 1], [0, 1])
    engine = fig.get_layout_engine()
    save_png(fig, tmp_path / "c.png")
    assert fig.get_layout_engine() is engine


_DRAW = """
import sys, json
from pathlib import Path
import pandas as pd
from reports.figures import warm_up
from reports.plots import plot_latency
if sys.argv[2] == "warm":
    warm_up()
rng = __import__("numpy").random.default_rng(5)
n = 400
arrival = rng.uniform(0, 50, n).cumsum() / 10
requests = pd.DataFrame({
    "arrival_s": arrival, "first_token_s": arrival + rng.uniform(0.05, 0.4, n),
    "output_tokens": rng.integers(1, 200, n),
})
requests["finish_s"] = requests["first_token_s"] + requests["output_tokens"] * 0.012
plot_latency(requests, Path(sys.argv[1]))
"""


def test_warm_up_changes_no_byte_of_later_plots(tmp_path: Path) -> None:
    """A fresh process that calls warm_up first writes the same latency PNG, byte for
    byte, as one that does not (the report's worker warms up while the run runs)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = {}
    for mode in ("cold", "warm"):
        out[mode] = tmp_path / f"{mode}.png"
        subprocess.run(
            [sys.executable, "-c", _DRAW, str(out[mode]), mode], check=True, cwd=root, timeout=120
        )
    assert out["cold"].read_bytes() == out["warm"].read_bytes()
    assert out["cold"].stat().st_size > 10_000
