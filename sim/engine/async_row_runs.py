"""The steps of an async fast-forward stretch in runs of the same requests
(:class:`sim.engine.stretches.RowRun`), which its decode rows are written by: a run
ends with each step whose apply finishes requests."""

from __future__ import annotations

from kvcore.request import Request
from sim.engine.stretches import RowRun


def row_runs(
    k: int,
    batch: int,
    left: list[int],
    finished: list[Request],
    finished_in: list[int],
    rids: list[str] | None,
    lo: int = 0,
) -> list[RowRun]:
    """The ``k`` applied steps of a stretch of ``batch`` requests in runs of the same
    requests: step ``r`` (0-based; iteration ``r + 1`` applies batch ``N + r``) decodes
    the requests that finish after iteration ``r`` (``left``: the iteration each
    finishes in); a run ends with each step in which requests finish (``finished``, in
    iteration ``finished_in``); ``rids``: the requests' ids, when decisions are
    written. From step ``lo`` on (the steps before it written otherwise; ``batch``:
    the requests of step 0)."""
    if not finished and not lo:
        return [RowRun(0, k, batch, batch, rids, [])]
    runs: list[RowRun] = []
    size = sum(1 for f in left if f > lo)
    i = sum(1 for f in finished_in if f <= lo)
    while lo < k:
        hi = finished_in[i] if i < len(finished_in) else k
        gone: list[str] = []
        while i < len(finished_in) and finished_in[i] == hi:
            gone.append(finished[i].request_id)
            i += 1
        ids = None if rids is None else [r for r, f in zip(rids, left) if f > lo]
        runs.append(RowRun(lo, hi, size, size - len(gone), ids, gone))
        lo, size = hi, size - len(gone)
    return runs
