"""A conformance trace's arrivals and aborts, step by step, for every differential
loop (kvcore's side and the vLLM drivers', sync and async alike).

Standard library only: the vLLM drivers load it by path beside them, as they load
their other siblings, and kvsim imports it as ``sim.conformance.trace_feed``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def ordered_trace(trace: list[dict[str, Any]]) -> list[tuple[float, dict[str, Any]]]:
    """Requests sorted stably by arrival step, each with its arrival time (the step,
    plus 1e-9 per earlier request: vLLM's FCFS order is arrival, then submission)."""
    reqs = sorted(trace, key=lambda r: int(r["arrival_step"]))
    return [(int(r["arrival_step"]) + i * 1e-9, r) for i, r in enumerate(reqs)]


class TraceFeed:
    """Feeds a trace to one scheduler: ``add(spec, arrival)`` adds a request,
    ``abort(request_id)`` aborts one and returns the ids it finished."""

    def __init__(
        self,
        trace: list[dict[str, Any]],
        add: Callable[[dict[str, Any], float], None],
        abort: Callable[[str], list[str]],
    ) -> None:
        self.pending = ordered_trace(trace)
        self.aborts = sorted(
            (int(s["abort_step"]), i, str(s["request_id"]))
            for i, (_, s) in enumerate(self.pending)
            if s.get("abort_step") is not None
        )
        self._add = add
        self._abort = abort
        self._next = self._next_abort = 0

    @property
    def drained(self) -> bool:
        """Every request of the trace was added."""
        return self._next == len(self.pending)

    def at_step(self, step: int) -> list[str]:
        """Add the requests arriving by ``step``, then abort those due by it; returns
        the ids the aborts finished."""
        pending, aborts = self.pending, self.aborts
        while self._next < len(pending) and pending[self._next][1]["arrival_step"] <= step:
            arrival, spec = pending[self._next]
            self._add(spec, arrival)
            self._next += 1
        aborted: list[str] = []
        while self._next_abort < len(aborts) and aborts[self._next_abort][0] <= step:
            aborted += self._abort(aborts[self._next_abort][2])
            self._next_abort += 1
        return aborted


def summary_line(steps: int, free_blocks: int) -> dict[str, Any]:
    """A case's last line: the steps run and the free blocks left."""
    return {"type": "summary", "steps": steps, "free_blocks_end": free_blocks}
