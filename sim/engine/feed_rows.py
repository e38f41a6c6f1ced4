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

from bisect import bisect_left, bisect_right
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


class _Counts:
    """How many members decode in a step, and run after one, from the members'
    admission and finish iterations sorted (a member decodes in step ``r`` when
    ``admitted < r < left``)."""

    __slots__ = ("admitted", "left")

    def __init__(self, m: FedMembers) -> None:
        self.admitted = sorted(m.admitted)
        self.left = sorted(m.left)

    def decoding(self, r: int) -> int:
        """Members in step ``r``'s batch as decodes."""
        return bisect_left(self.admitted, r) - bisect_right(self.left, r)

    def running(self, r: int) -> int:
        """Members running after step ``r`` (iteration ``r + 1`` admitted some and
        finished others)."""
        return bisect_right(self.admitted, r + 1) - bisect_right(self.left, r + 1)

    def finishing(self, e: int) -> int:
        """Members that finish in iteration ``e``."""
        return bisect_right(self.left, e) - bisect_left(self.left, e)

    def next_finish(self, r: int, hi: int) -> int:
        """The first iteration after ``r`` in which members finish, at most ``hi``."""
        i = bisect_right(self.left, r)
        return min(self.left[i], hi) if i < len(self.left) else hi


def fed_rows(
    m: FedMembers,
    k: int,
    result: AsyncStretchResult,
    head_out: SchedulerOutput,
    head_tokens: tuple[int, int],
    decisions: bool,
) -> list[RowSpec | RowRun]:
    """The ``k`` rows of the stretch, in order: :class:`RowSpec` s and runs of plain
    decode rows (ids, scheduled and finished requests in them only when
    ``decisions``). ``head_out``, ``head_tokens``: the batch in flight at the start's
    output, prefill and decode tokens."""
    prefill: dict[int, int] = {}  # iteration -> its joins' prompt tokens
    for j, p in zip(m.iterations, m.prefills):
        prefill[j] = prefill.get(j, 0) + p
    counts = _Counts(m)
    first = _lookups(result.prefix_cache_stats)
    special = {r for j in prefill for r in (j - 1, j)}
    if (
        head_tokens[0]
        or head_tokens[1] != counts.decoding(0)
        or head_out.preempted_req_ids
        or any(first)
    ):
        special.add(0)
    out: list[RowSpec | RowRun] = []
    lo = 0
    for r in sorted(s for s in special if s < k):
        out += _runs(m, counts, lo, r, decisions)
        if r == 0:
            tokens = head_tokens
            lookups = first
            scheduled = dict(head_out.num_scheduled_tokens) if decisions else {}
        else:
            tokens = (prefill.get(r, 0), counts.decoding(r))
            lookups = _lookups(result.join_stats.get(r + 1)) if r + 1 in prefill else (0, 0)
            scheduled = _scheduled(m, r) if decisions else {}
        finished = [rid for rid, f in zip(m.ids, m.left) if f == r + 1] if decisions else []
        preempted = set(head_out.preempted_req_ids) if r == 0 else set()
        out.append(RowSpec(r, counts.running(r), tokens, lookups, scheduled, preempted, finished))
        lo = r + 1
    out += _runs(m, counts, lo, k, decisions)
    return out


def _scheduled(m: FedMembers, r: int) -> dict[str, int]:
    """Step ``r``'s scheduled tokens by request (``r > 0``): one for each decode, in
    running order, then the prompts of the requests admitted by iteration ``r``."""
    out = {rid: 1 for rid, a, f in zip(m.ids, m.admitted, m.left) if a < r < f}
    for req, j, p in zip(m.joined, m.iterations, m.prefills):
        if j == r:
            out[req.request_id] = p
    return out


def _runs(m: FedMembers, counts: _Counts, lo: int, hi: int, decisions: bool) -> list[RowRun]:
    """Steps ``lo .. hi - 1`` (plain decodes: nobody is admitted by their iterations)
    in runs of the same requests: a run ends with each step whose apply finishes
    requests."""
    runs: list[RowRun] = []
    r = lo
    while r < hi:
        size = counts.decoding(r)
        e = counts.next_finish(r, hi)
        gone = counts.finishing(e)
        ids: list[str] | None = None
        finished: list[str] = []
        if decisions:
            ids = [rid for rid, a, f in zip(m.ids, m.admitted, m.left) if a < r < f]
            finished = [rid for rid, a, f in zip(m.ids, m.admitted, m.left) if a < r and f == e]
        runs.append(RowRun(r, e, size, size - gone, ids, finished))
        r = e
    return runs
