"""Arrivals taken ahead by the async loop's stretches, from an open-loop workload's
feed (:class:`workloads.feed.ArrivalFeed`: a trace's, or a synthetic open loop of
single requests), instead of one stretch per arrival.

A :class:`FeedStretchRunner` is the async loop's arrival runner
(:class:`sim.engine.stretch_arrivals.ArrivalStretchRunner`) of a replica that replays
such a workload alone. Each request joins at the first iteration whose top (when the
batch before it starts, the one before that applied) is at or after its arrival, as
the loop adds arrivals before each ``schedule()``. A stretch times its batches in
order: runs of decode batches, each timed as the loop times them, until the top at or
after the next arrival; there the request is admitted
(:class:`kvcore.stretch_joins.Join`), and the batch after the top holds the running
decodes and its prompt (:class:`kvcore.join_foresight.JoinForesight` knows its
prefill before it happens, or the stretch stops there). It then plans the stretch
with those joins, applies it and writes its rows, each batch's as the loop writes it
(:mod:`sim.engine.feed_rows`). The stretch ends before the top at which a request it
does not take would join (the plan refused it, it could not be foreseen, a request
the engine rejects, the feed's last one, :data:`MAX_JOINS`), before the next event
that is not the feed's, and as the plan ends it. Units: seconds.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from kvcore.batch_queue import BatchQueue
from kvcore.fast_forward_async import AsyncDecodeStretch
from kvcore.fast_forward_async_plan import plan_async_decode_stretch
from kvcore.join_foresight import JoinForesight
from kvcore.request import Request
from kvcore.stretch_joins import Join
from sim.engine.feed_rows import FedMembers, RowSpec, fed_rows
from sim.engine.replica_parts import kvcore_request
from sim.engine.simpy_internals import next_time_except
from sim.engine.stretch_arrivals import ArrivalStretchRunner
from sim.engine.stretches import FAST_FORWARD_HORIZON, SAMPLE_TOKEN_ID, Segment

if TYPE_CHECKING:
    from sim.engine.regime import EngineRegime
    from sim.engine.replica_async import AsyncReplicaEngine
    from sim.engine.step_timing import StretchTimer
    from workloads.feed import ArrivalFeed
    from workloads.request import SimRequest

MAX_JOINS = 32
"""Most requests one stretch takes from the feed (planning a stretch costs the square
of its joins)."""


class FedTimes:
    """A stretch's batch times as the feed's requests join it: batches ``N + 1 ..``
    start at ``starts`` and run ``durations``, the last ending at ``end``; ``joins``
    (iteration 2 on: the feed's next requests, in order) with their ``prefills``;
    ``stop``: the stretch's iterations schedule before it. The members so far (the
    running requests, then the joins): ``computed0``, ``left`` and the iteration that
    ``admitted`` each (0: before the stretch; those that finished are dropped as the
    timing passes them), as in :class:`kvcore.fast_forward_async.AsyncDecodeStretch`;
    ``joining``: the prefills of the joins whose batch is not timed yet."""

    __slots__ = (
        "admitted", "computed0", "durations", "end", "joining", "joins", "left",
        "prefills", "starts", "stop",
    )  # fmt: skip

    def __init__(
        self, base: AsyncDecodeStretch, first: list[int], start: float, stop: float
    ) -> None:
        """``base``: the stretch planned with the joins of iteration 1 (``first``:
        their prefills) alone; ``start``: batch ``N + 1``'s."""
        self.starts: list[float] = []
        self.durations: list[float] = []
        self.end = start
        self.joins: list[Join] = []
        self.prefills: list[int] = []
        self.stop = stop
        self.computed0 = base.computed0 + base.join_computed0
        self.left = base.steps_left + base.join_steps_left
        self.admitted = [0] * len(base.computed0) + [1] * len(first)
        self.joining = list(first)

    def add(self, starts: list[float], durations: list[float], end: float) -> None:
        self.starts += starts
        self.durations += durations
        self.end = end

    def join(self, j: int, req: Request, prefill: int, mml: int) -> None:
        """``req`` joins in iteration ``j``, computing ``prefill`` prompt
        tokens (``mml``: the model's length), as :func:`kvcore.stretch_joins.plan_joins`
        counts it."""
        self.joins.append(Join(j, req))
        self.prefills.append(prefill)
        self.joining.append(prefill)
        prompt = req.num_tokens
        self.computed0.append(prompt - j)
        self.left.append(j + min(req.max_tokens, mml - prompt))
        self.admitted.append(j)

    def members(self, j: int) -> tuple[list[int], list[int]]:
        """``computed0`` and ``left`` of the members admitted before iteration ``j``
        that run in it; the members that finished before it are dropped."""
        c0s, lefts, adm = self.computed0, self.left, self.admitted
        if any(f <= j for f in lefts):
            live = [i for i, f in enumerate(lefts) if f > j]
            self.computed0 = c0s = [c0s[i] for i in live]
            self.left = lefts = [lefts[i] for i in live]
            self.admitted = adm = [adm[i] for i in live]
        pairs = [(c, f) for c, f, a in zip(c0s, lefts, adm) if a < j]
        return [c for c, _ in pairs], [f for _, f in pairs]


class FeedStretchRunner(ArrivalStretchRunner):
    """The async loop's arrival runner; with a feed (:meth:`use_feed`), it takes the
    feed's requests ahead (see the module docstring). Built with
    :class:`sim.engine.stretches.StretchRunner`'s arguments."""

    def __init__(
        self, engine: AsyncReplicaEngine, timer: StretchTimer, regime: EngineRegime
    ) -> None:
        """:class:`sim.engine.stretches_async.AsyncStretchRunner`'s arguments."""
        super().__init__(engine, timer, regime)
        self.feed: ArrivalFeed | None = None
        self.num_fed = 0  # requests taken from the feed

    def use_feed(self, feed: ArrivalFeed) -> None:
        """Take requests ahead from ``feed`` (the replica replays its workload alone)."""
        self.feed = feed

    def try_fast_forward(self) -> Generator[simpy.Event, Any, bool]:
        if self.feed is None or self.engine.has_pending:
            return (yield from super().try_fast_forward())
        return (yield from self.admit_arrivals([]))

    def _bound(self) -> float | None:
        """With a feed: the next event that is not the feed's process's wait (the
        feed's requests a stretch does not take bound it instead)."""
        until = super()._bound()
        if until is None or self.feed is None:
            return until
        return next_time_except(self.env, self.feed.waiting)

    def _join_segment(
        self, queue: BatchQueue, until: float, arrivals: list[Request]
    ) -> Segment | None:
        if self.feed is None:
            return super()._join_segment(queue, until, arrivals)
        return self._feed_segment(queue, until, arrivals)

    def _next_segment(self, queue: BatchQueue, until: float) -> Segment | None:
        if self.feed is None:
            return super()._next_segment(queue, until)
        return self._feed_segment(queue, until, [])

    def _feed_segment(
        self, queue: BatchQueue, until: float, arrivals: list[Request]
    ) -> Segment | None:
        """Plan, apply and write one stretch from the batch in flight that admits
        ``arrivals`` (not yet added) in iteration 1 and the feed's requests after it
        (see the module docstring); None when nothing changed."""
        engine = self.async_engine
        head = engine.oldest_in_flight()
        assert self.feed is not None
        nxt = self.feed.upcoming(0)
        if nxt is not None and nxt.arrival_s <= head[0]:
            return None  # it joins in iteration 1 and has not come to the engine yet
        head_out = queue.queue[0].scheduler_output
        through = not self._reacts_to_finish
        first = [Join(1, r) for r in arrivals]
        base = plan_async_decode_stretch(queue, FAST_FORWARD_HORIZON, through, first)
        if base is None or len(base.joins) < len(arrivals):
            return None
        prefills = base.first_prefills() if arrivals else []
        if prefills is None or 1 in prefills:  # one token: a decode (stretch_arrivals)
            return None
        times = self._feed_times(base, arrivals, prefills, head[0], until)
        joins = first + times.joins
        stretch = plan_async_decode_stretch(queue, FAST_FORWARD_HORIZON, through, joins)
        if stretch is None or len(stretch.joins) < len(arrivals):
            return None
        k, end = self._fed_last(stretch, times)
        if k < (2 if arrivals else 1):
            return None
        fed = sum(1 for j in stretch.joins[len(arrivals) :] if j.iteration < k)
        running = list(self.scheduler.running)
        engine.joined(arrivals)
        self._take(fed, [j.request for j in times.joins[:fed]])
        self.num_joined += len(arrivals)
        first_apply = engine.gpu_free
        for r in running:  # first tokens come with the batch in flight (prompts in it)
            if not r.output_token_ids:
                engine.note_first_token(r.request_id, first_apply)
        result = stretch.apply(k, SAMPLE_TOKEN_ID)
        members = FedMembers(running, stretch, len(arrivals) + fed, prefills + times.prefills)
        members.check_hits()
        starts, durations = times.starts[: k - 1], times.durations[: k - 1]
        step0, finish_s = self._applied(
            result.scheduler_output, k, end, starts, durations, head[0], head[1],
            result.finished_in,
        )  # fmt: skip
        for r, j in zip(members.joined, members.iterations):
            engine.note_first_token(r.request_id, starts[j + 1] if k > j + 1 else end)
        ids = members.ids if self.decisions is not None else None
        seg = Segment(
            step0, starts, durations, end, stretch.batch_size, result.records,
            result.finished, ids, finish_s=finish_s,
        )  # fmt: skip
        decisions = self.decisions is not None
        for row in fed_rows(members, k, result, head_out, head[2:], decisions):
            if isinstance(row, RowSpec):
                self._write_row(seg, *row)
            else:
                self._write_rows(seg, row)
        return seg

    def _take(self, n: int, reqs: list[Request]) -> None:
        """Take the feed's next ``n`` requests (``reqs``: theirs in kvcore) for the
        engine."""
        assert self.feed is not None
        self.async_engine.fed(self.feed.take(n), reqs)
        self.num_fed += n

    def _join_at(
        self, times: FedTimes, foresight: JoinForesight, j: int, top: float
    ) -> SimRequest | None:
        """Admit in iteration ``j`` (its top at ``top``) the feed's next requests that
        arrived by then, as long as a stretch may take them; returns the next request
        not taken (None: the feed has none left)."""
        feed = self.feed
        assert feed is not None
        mml = self.scheduler.max_model_len
        i = len(times.joins)
        sr = feed.upcoming(i)
        while sr is not None and sr.arrival_s <= top:  # j > 1: _feed_times checks j = 1
            if i >= MAX_JOINS or i + 1 >= feed.num_left or sr.num_prompt_tokens >= mml:
                break
            req = kvcore_request(sr, top, self.async_engine.hasher)
            p = foresight.prefill(req)
            if p is None or p == 1:  # one token: a decode (stretch_arrivals)
                break
            times.join(j, req, p, mml)
            i += 1
            sr = feed.upcoming(i)
        return sr

    def _fed_last(self, stretch: AsyncDecodeStretch, times: FedTimes) -> tuple[int, float]:
        """The last iteration of ``stretch`` (its batches timed by ``times``) and when
        it applies its batch: as :meth:`_last_iteration` has it before ``times.stop``,
        within the plan, and not one that admits a request (its prompt would be in
        flight at the end)."""
        starts = times.starts
        m = min(bisect_left(starts, times.stop), stretch.max_steps - 1)
        end = times.end if m == len(starts) else starts[m]
        ntaken = len(stretch.joins)
        left = stretch.steps_left + stretch.join_steps_left[:ntaken]
        k, end = self._last_iteration(starts[:m], end, times.stop, left)
        while k > 0 and not stretch.can_end_at(k):
            k -= 1
            end = starts[k - 1] if k else end
        return k, end

    def _feed_times(
        self,
        base: AsyncDecodeStretch,
        arrivals: list[Request],
        prefills: list[int],
        top1: float,
        until: float,
    ) -> FedTimes:
        """The batches of a stretch from ``base`` (planned with ``arrivals`` joining in
        iteration 1, with ``prefills``; ``top1``: iteration 1's top, before the feed's
        next request) timed as the feed's requests join it, before ``until``."""
        feed = self.feed
        assert feed is not None
        times = FedTimes(base, prefills, self.async_engine.gpu_free, until)
        # Batches N + 1 .. N + n at most. Not base's: the joins keep its batch going
        # after its requests finish (the plan with the joins bounds the stretch).
        n = FAST_FORWARD_HORIZON - 1
        hits1 = [r.num_tokens - p for r, p in zip(arrivals, prefills)]
        j = 1  # the next batch: N + j
        foresight = JoinForesight(self.scheduler, arrivals)
        while j <= n and times.end < until:
            # The top of iteration j: batch N + j - 1 starts (batch N's for j = 1).
            top = times.starts[-1] if times.starts else top1
            sr = self._join_at(times, foresight, j, top)
            if sr is not None and sr.arrival_s <= top:  # it would join here: not taken
                break
            s = times.end
            if times.joining:  # batch N + j: the decodes, then the prompts
                c0s, lefts, adm = times.computed0, times.left, times.admitted
                dec = [c + j - 1 for c, f, a in zip(c0s, lefts, adm) if a < j and f > j]
                hits = hits1 if j == 1 else [0] * len(times.joining)
                d = self.engine.costs.seconds([1] * len(dec) + times.joining, dec + hits)
                times.add([s], [d], s + d)
                times.joining = []
                j += 1
                continue
            # Decode batches N + j .. up to the first that starts at or after the next
            # arrival (the top of the iteration that admits it).
            mc, mf = times.members(j)
            last = max(mf, default=0) - 1  # the last batch that decodes something
            if last < j:
                break  # the batch would be empty: the engine waits for an arrival
            t = until if sr is None else min(sr.arrival_s, until)
            more, more_d, end = self._batch_starts(s, t, mc, mf, min(n, last), j0=j)
            if not more:  # batch N + j starts at or after it
                more, more_d, end = self._batch_starts(s, float("inf"), mc, mf, j, j0=j)
            times.add(more, more_d, end)
            j += len(more)
        nxt = feed.upcoming(len(times.joins))  # not taken: joins at or after a top after
        if nxt is not None:
            times.stop = min(times.stop, nxt.arrival_s)
        return times
