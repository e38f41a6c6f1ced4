"""The step loop of a differential replay that feeds a conformance trace, one copy for
kvcore's side and the vLLM drivers' (sync and async alike): the trace's arrivals and
aborts, the end test, the step limit and the step count.

Standard library only: the vLLM drivers load it by path beside them, as they load
their other siblings, and kvsim imports it as ``sim.conformance.step_loop``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.conformance.trace_feed import TraceFeed


def replay_steps(
    feed: TraceFeed,
    has_work: Callable[[], bool],
    step_line: Callable[[int, list[str]], dict[str, Any]],
    max_steps: int,
) -> tuple[list[dict[str, Any]], int]:
    """Run steps 0, 1, ... until the whole trace was added and ``has_work()`` is false:
    before each step ``feed`` adds the requests arriving by it and aborts those due,
    then ``step_line(step, aborted)`` runs the step and returns its line (``aborted``:
    the request ids the aborts finished). Returns the lines and the number of steps
    run; RuntimeError when the run goes past ``max_steps``."""
    lines: list[dict[str, Any]] = []
    step = 0
    while True:
        aborted = feed.at_step(step)
        if feed.drained and not has_work():
            break
        if step > max_steps:
            raise RuntimeError(f"no end after {max_steps} steps")
        lines.append(step_line(step, aborted))
        step += 1
    return lines, step
