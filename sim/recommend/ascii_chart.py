"""The Pareto chart as text, for the terminal: at most 80 columns wide.

``.`` a simulated configuration that met the SLOs, ``o`` one on the frontier, ``*``
the chosen deployment (drawn last, over anything beneath it). Axes are linear from
zero; the y axis is labelled on the left, the x axis below.
"""

from __future__ import annotations

from sim.recommend.pareto import Point, X, Y

WIDTH = 80
HEIGHT = 17
LABEL = 8
"""Characters of the y-axis labels (plus one for the axis line)."""


def _nice(top: float) -> float:
    """A round upper axis limit at or above ``top`` (> 0)."""
    if top <= 0:
        return 1.0
    scale = 10 ** len(str(int(top))) / 10
    for step in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if step * scale >= top:
            return step * scale
    return 10 * scale


def render(points: list[Point], front: list[Point], chosen: Point | None) -> str:
    """The chart's lines joined by newlines; every line at most :data:`WIDTH` long."""
    shown = [p for p in points if p.get(X) is not None and p.get(Y) is not None]
    if chosen is not None and chosen.get(Y) is not None:
        shown = [*shown, chosen]
    if not shown:
        return "(no configuration met the SLOs: nothing to chart)"
    x_top = _nice(max(p[X] for p in shown))
    y_top = _nice(max(p[Y] for p in shown))
    cols = WIDTH - LABEL - 1
    grid = [[" "] * cols for _ in range(HEIGHT)]

    def put(p: Point, mark: str) -> None:
        col = min(cols - 1, int(round(p[X] / x_top * (cols - 1))))
        row = HEIGHT - 1 - min(HEIGHT - 1, int(round(p[Y] / y_top * (HEIGHT - 1))))
        if mark == "." and grid[row][col] != " ":
            return
        grid[row][col] = mark

    for p in points:
        if p.get(X) is not None and p.get(Y) is not None:
            put(p, ".")
    for p in front:
        put(p, "o")
    if chosen is not None and chosen.get(Y) is not None:
        put(chosen, "*")
    lines = ["tokens/s/user"]
    for r, row in enumerate(grid):
        value = y_top * (HEIGHT - 1 - r) / (HEIGHT - 1)
        label = f"{value:>{LABEL}.4g}" if (HEIGHT - 1 - r) % 4 == 0 else " " * LABEL
        lines.append(f"{label}|{''.join(row)}".rstrip())
    lines.append(" " * LABEL + "+" + "-" * cols)
    ticks = [0.0, x_top / 4, x_top / 2, 3 * x_top / 4, x_top]
    axis = [" "] * (cols + 12)
    for t in ticks:
        text = f"{t:.4g}"
        start = min(int(round(t / x_top * (cols - 1))), cols - len(text))
        axis[start : start + len(text)] = list(text)
    lines.append((" " * (LABEL + 1) + "".join(axis)).rstrip()[:WIDTH])
    lines.append("tokens/s/GPU".rjust(WIDTH))
    lines.append(". met the SLOs   o Pareto frontier   * chosen deployment")
    return "\n".join(line[:WIDTH] for line in lines)
