"""The progress bar the ``kvsim`` commands show on a terminal (rich).

One line per task: what it is, a bar, done / total, the rate (in the task's
``unit`` per wall-clock second), the elapsed time and the estimated time left. The
bar is transient: it disappears when the command ends, so the output that stays is
the command's own.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class RateColumn(ProgressColumn):
    """Completed units per wall-clock second, e.g. ``1,234 req/s`` (the task's field
    ``unit``; ``/s`` alone without one); ``-`` before there is an estimate."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        unit = task.fields.get("unit", "")
        suffix = f" {unit}/s" if unit else "/s"
        if speed is None:
            return Text(f"- {suffix.strip()}", style="progress.data.speed")
        digits = 0 if speed >= 100 else 1 if speed >= 10 else 2
        return Text(f"{speed:,.{digits}f}{suffix}", style="progress.data.speed")


def progress_bar(console: Console) -> Progress:
    """A transient bar: description, bar, done / total, rate, elapsed, time left.

    Give each task its unit: ``progress.add_task("simulating", total=n, unit="req")``.
    """
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
