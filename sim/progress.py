"""The progress bar the ``kvsim`` commands show on a terminal (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn


def progress_bar(console: Console) -> Progress:
    """A transient bar: description, bar, done / total, elapsed time."""
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
