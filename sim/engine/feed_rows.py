"""The rows of a stretch that admits requests in its iterations
(:mod:`sim.engine.stretch_feed`), each as the async loop's ``_record_step`` writes it.

Step ``r`` of the stretch (0-based) is batch ``N + r``, scheduled by iteration ``r``
and applied by iteration ``r + 1``. Its row is a plain decode row (written in runs,
:class:`sim.engine.stretches.RowRun`) unless it holds prompts (requests admitted by
iteration ``r``), reports lookups (iteration ``r + 1`` admits requests: its apply
reports their prefix-cache lookups, and they count as running after it), or is the
first step and not a plain decode; those are written one by one (:class:`RowSpec`).
"""

from __future__ import annotations

from typing import NamedTuple

from kvcore.fast_forward_async import AsyncDecodeStretch, AsyncStretchResult
from kvcore.kv_cache_manager import PrefixCacheStats
from kvcore.request import Request
from kvcore.sched_output import SchedulerOutput
from sim.engine.stretches import RowRun


class FedMembers:
    """The requests of a stretch in running order: those running at its start, then
    the ``njoins`` first joins of ``stretch`` (``prefills``: their prompt tokens
    computed, as foreseen), each with the iteration it was admitted by (-1: before;
    in step ``r`` from ``r > admitted`` on) and the one it finishes in."""

    __slots__ = ("admitted", "ids", "iterations", "joined", "left", "prefills")

    def __init__(
        self,
        running: list[Request],
        stretch: AsyncDecodeStretch,
        njoins: int,
        prefills: list[int],
    ) -> None:
        joins = stretch.joins[:njoins]
        self.joined = [j.request for j in joins]
        self.iterations = [j.iteration for j in joins]
        self.prefills = prefills[:njoins]
        self.ids = [r.request_id for r in running] + [r.request_id for r in self.joined]
        self.admitted = [-1] * len(running) + self.iterations
        self.left = stretch.steps_left + stretch.join_steps_left[:njoins]

    def check_hits(self) -> None:
        """After the apply: each admission hit what was foreseen."""
        for r, p in zip(self.joined, self.prefills):
            assert r.num_prompt_tokens - r.num_cached_tokens == p, "prefix hits changed"


class RowSpec(NamedTuple):
    """One row written by itself (the arguments of the runner's ``_write_row``)."""

    step: int
    num_running: int
    tokens: tuple[int, int]
    lookups: tuple[int, int]
    scheduled: dict[str, int]
    preempted: set[str]
    finished: list[str]


def _lookups(stats: PrefixCacheStats | None) -> tuple[int, int]:
    if stats is None:
        return 0, 0
    return stats.queries + stats.preempted_queries, stats.hits + stats.preempted_hits


def fed_rows(
    m: FedMembers,
    k: int,
    result: AsyncStretchResult,
    head_out: SchedulerOutput,
    head_tokens: tuple[int, int],
    decisions: bool,
) -> list[RowSpec | RowRun]:
    """The ``k`` rows of the stretch, in order: :class:`RowSpec` s and runs of plain
    decode rows (ids in them when ``decisions``). ``head_out``, ``head_tokens``: the
    batch in flight at the start's output, prefill and decode tokens."""
    admits = set(m.iterations)
    first = _lookups(result.prefix_cache_stats)
    batch = sum(1 for a in m.admitted if a < 0)
    special = {r for j in admits for r in (j - 1, j)}
    if head_tokens[0] or head_tokens[1] != batch or head_out.preempted_req_ids or any(first):
        special.add(0)
    out: list[RowSpec | RowRun] = []
    lo = 0
    for r in sorted(s for s in special if s < k):
        out += _runs(m, lo, r, decisions)
        if r == 0:
            spec = _row(m, 0, head_tokens, first, dict(head_out.num_scheduled_tokens))
            out.append(spec._replace(preempted=set(head_out.preempted_req_ids)))
        else:
            lookups = _lookups(result.join_stats.get(r + 1)) if r + 1 in admits else (0, 0)
            scheduled = {rid: 1 for rid, a, f in zip(m.ids, m.admitted, m.left) if a < r and f > r}
            prefill = 0
            for r2, j, p in zip(m.joined, m.iterations, m.prefills):
                if j == r:
                    scheduled[r2.request_id] = p
                    prefill += p
            decode = sum(1 for a, f in zip(m.admitted, m.left) if a < r and f > r)
            out.append(_row(m, r, (prefill, decode), lookups, scheduled))
        lo = r + 1
    out += _runs(m, lo, k, decisions)
    return out


def _row(
    m: FedMembers,
    r: int,
    tokens: tuple[int, int],
    lookups: tuple[int, int],
    scheduled: dict[str, int],
) -> RowSpec:
    """Step ``r``'s row: running after iteration ``r + 1`` those admitted by it that
    do not finish in it; nothing preempted (the head's is set by the caller)."""
    num_running = sum(1 for a, f in zip(m.admitted, m.left) if a <= r + 1 and f > r + 1)
    finished = [rid for rid, f in zip(m.ids, m.left) if f == r + 1]
    return RowSpec(r, num_running, tokens, lookups, scheduled, set(), finished)


def _runs(m: FedMembers, lo: int, hi: int, decisions: bool) -> list[RowRun]:
    """Steps ``lo .. hi - 1`` (plain decodes) in runs of the same requests: a run ends
    with each step whose apply finishes requests."""
    runs: list[RowRun] = []
    r = lo
    while r < hi:
        dec = [i for i, (a, f) in enumerate(zip(m.admitted, m.left)) if a < r and f > r]
        ends = [m.left[i] for i in dec if m.left[i] <= hi]
        e = min(ends) if ends else hi
        gone = [m.ids[i] for i in dec if m.left[i] == e]
        ids = [m.ids[i] for i in dec] if decisions else None
        runs.append(RowRun(r, e, len(dec), len(dec) - len(gone), ids, gone))
        r = e
    return runs
