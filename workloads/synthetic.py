"""A workload drawn from a ``WorkloadSpec``: open- or closed-loop arrivals of sessions.

Without ``sessions`` every session is one request. In open loop each arrival starts a
session; in closed loop each of the ``concurrency`` clients runs sessions back to
back. Session ``i`` is drawn from the stream ``(seed, session, i)``, so which requests
a workload makes does not depend on the engine, only when the follow-ups are sent.
"""

from __future__ import annotations

from array import array
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import simpy

from workloads.arrivals import arrival_times
from workloads.distributions import LengthSampler, make_sampler
from workloads.feed import ArrivalFeed, At
from workloads.process import AHEAD_CHUNK, Chunks, Prepare, Workload, draw_prompt
from workloads.request import SimRequest
from workloads.sessions import SessionPlan, SessionPlanner
from workloads.spec import WorkloadSpec
from workloads.spec_arrivals import ClosedLoopArrival, OpenLoopArrival
from workloads.tokens import TAG_ARRIVALS, stream, token_typecode
from workloads.trace_rows import prompt_after_hashed


def build_samplers(
    spec: WorkloadSpec, base_dir: Path, file: str
) -> tuple[LengthSampler, LengthSampler, LengthSampler | None]:
    """Prompt, output and turns samplers (empirical files read relative to ``base_dir``)."""
    prompt = make_sampler(spec.prompt_len, base_dir, file, "prompt_len")
    output = make_sampler(spec.output_len, base_dir, file, "output_len")
    turns = None
    if spec.sessions is not None:
        turns = make_sampler(spec.sessions.turns, base_dir, file, "sessions.turns")
    return prompt, output, turns


DrawnTurn = tuple[int, "array | None", int, int, "str | None", bool, "list[Any] | None"]
"""A single-turn session drawn ahead: its prompt length, the prompt's token ids after
those its block hashes cover (a compact ``array``; it pickles as bytes), max_tokens,
priority, session id, whether it is unshared (``SimRequest.unshared``) and those
hashes (``prepare``'s; None without it). When
``prepare`` returns None (the engine will reject the prompt unseen), the ids are not
drawn (None)."""


class SyntheticWorkload(Workload):
    """Requests drawn from a spec; see the module docstring."""

    def __init__(
        self,
        spec: WorkloadSpec,
        name: str,
        base_dir: Path | str,
        file: str,
        resolved: dict[str, Any] | None = None,
    ) -> None:
        """``base_dir``: where ``empirical`` paths are resolved; ``file``: for errors."""
        super().__init__(name, resolved or spec.model_dump(mode="json"), spec.num_requests)
        self.reacts_to_finish = spec.sessions is not None or isinstance(
            spec.arrival, ClosedLoopArrival
        )
        self.workload_spec = spec
        prompt, output, turns = build_samplers(spec, Path(base_dir), file)
        self.samplers = (prompt, output, turns)
        """The prompt, output and turns samplers (turns None without sessions)."""
        self._planner = SessionPlanner(spec, spec.seed, prompt, output, turns)
        self._planned = 0
        self._next_session = 0
        self._live: dict[str, SessionPlan] = {}
        self._ahead: Chunks | None = None  # single-turn sessions drawn elsewhere
        self._ahead_chunk: list[DrawnTurn] = []
        self._ahead_pos = 0
        self._timeout = spec.timeout_s
        self.has_timeouts = any(spec.stage_timeout(s) is not None for s in spec.all_stages)

    def draw_ahead(self, prepare: Prepare | None = None) -> Iterator[list[DrawnTurn]] | None:
        """Open loop without sessions: what each arrival submits depends on its index
        alone (see :meth:`_drawn_ahead`)."""
        return None if self.reacts_to_finish else self._drawn_ahead(prepare)

    def _drawn_ahead(self, prepare: Prepare | None) -> Iterator[list[DrawnTurn]]:
        """Single-turn sessions 0, 1, ... in chunks: what :meth:`_start_session` would
        draw for each, all but its request id and arrival time, as :data:`DrawnTurn`
        (``prepare``'s result goes to ``prompt_block_hashes``)."""
        total = self.workload_spec.num_requests
        typecode = token_typecode(self.workload_spec.vocab_size)
        index = 0
        size = 64  # a small first chunk: the loop needs it at once
        while total is None or index < total:
            end = index + size if total is None else min(index + size, total)
            chunk: list[DrawnTurn] = []
            for i in range(index, end):
                req = self._planner.next_request(self._planner.plan(i, 1, None), "", 0.0)
                num_tokens, tail, hashes = draw_prompt(req, prepare, typecode)
                chunk.append(
                    (
                        num_tokens,
                        tail,
                        req.max_tokens,
                        req.priority,
                        req.session_id,
                        req.unshared,
                        hashes,
                    )
                )
            yield chunk
            index = end
            size = AHEAD_CHUNK

    def open_feed(self, at: At) -> ArrivalFeed | None:
        """An :class:`workloads.feed.ArrivalFeed` of an open loop of single requests
        bounded by a request count, without client timeouts (before :meth:`start`):
        its process then submits only the requests the engine does not take."""
        spec = self.workload_spec
        arrival = spec.arrival
        if self._started or self.reacts_to_finish or self.has_timeouts:
            return None
        if isinstance(arrival, ClosedLoopArrival) or spec.duration_s is not None:
            return None
        times = arrival_times(arrival, stream(spec.seed, TAG_ARRIVALS))
        self._feed = ArrivalFeed(times, spec.num_requests, self._fed_request, at, self._count_taken)
        return self._feed

    def _fed_request(self, index: int, now: float) -> SimRequest:
        """Request ``index`` of the feed, arriving at ``now`` (s): what
        :meth:`_start_session` submits for it, built without submitting it (a fed
        workload has no timeouts)."""
        request_id = f"req-{index}"
        if self._ahead is not None:
            return self._drawn_turn(now, request_id)
        total = self.workload_spec.num_requests
        cap = None if total is None else total - self._planned
        plan = self._planner.plan(self._next_session, cap, None)
        self._next_session += 1
        self._planned += plan.num_turns
        return self._planner.next_request(plan, request_id, now)

    # -- SimPy side -----------------------------------------------------------

    def _begin(self, env: simpy.Environment, ahead: Chunks | None) -> None:
        arrival = self.workload_spec.arrival
        if isinstance(arrival, ClosedLoopArrival):
            for client in range(arrival.concurrency):
                self._after(0.0, lambda c=client: self._start_session(c))
        else:
            if ahead is not None and not self.reacts_to_finish:
                self._ahead = ahead
            if self._feed is not None:
                env.process(self._feed.replay(env, self._emit))
            else:
                env.process(self._open_loop(env))
        if self.workload_spec.duration_s is not None:
            self._after(self.workload_spec.duration_s, self._mark_done)

    def _open_loop(self, env: simpy.Environment) -> Generator[simpy.Event, None, None]:
        rng = stream(self.workload_spec.seed, TAG_ARRIVALS)
        end = self.workload_spec.duration_s
        arrival = self.workload_spec.arrival
        assert not isinstance(arrival, ClosedLoopArrival)
        open_loop: OpenLoopArrival = arrival
        for when in arrival_times(open_loop, rng):
            if end is not None and when >= end:
                return
            if not self._has_budget():
                return
            if when > env.now:
                yield env.timeout(when - env.now)
            self._start_session(None)

    def _has_budget(self) -> bool:
        total = self.workload_spec.num_requests
        return total is None or self._planned < total

    def _time_left(self) -> bool:
        end = self.workload_spec.duration_s
        return end is None or (self._env is not None and self._env.now < end)

    def _start_session(self, client: int | None) -> None:
        if not self._has_budget() or not self._time_left():
            return
        if self._ahead is not None:
            self._send_ahead()
            return
        total = self.workload_spec.num_requests
        cap = None if total is None else total - self._planned
        plan = self._planner.plan(self._next_session, cap, client)
        self._next_session += 1
        self._planned += plan.num_turns
        self._send_turn(plan)

    def _send_ahead(self) -> None:
        """Submit the next single-turn session drawn by the helper."""
        assert self._env is not None
        self._emit(self._drawn_turn(float(self._env.now), f"req-{self.num_submitted}"))

    def _drawn_turn(self, now: float, request_id: str) -> SimRequest:
        """The next single-turn session drawn by the helper, ``request_id``, arriving
        at ``now``."""
        assert self._ahead is not None
        if self._ahead_pos == len(self._ahead_chunk):
            self._ahead_chunk = self._ahead.next()
            self._ahead_pos = 0
        drawn = self._ahead_chunk[self._ahead_pos]
        num_tokens, tail, max_tokens, priority, session_id, unshared, hashes = drawn
        self._ahead_pos += 1
        index = self._next_session
        self._next_session += 1
        self._planned += 1
        if tail is None:  # not drawn (to be rejected): drawn here if used
            request = SimRequest(
                request_id=request_id,
                arrival_s=now,
                prompt_token_ids=None,
                num_prompt_tokens=num_tokens,
                build_prompt=lambda: self._redraw_prompt(index),
                max_tokens=max_tokens,
                priority=priority,
                session_id=session_id,
                unshared=unshared,
            )
        else:
            request = SimRequest(
                request_id=request_id,
                arrival_s=now,
                prompt_token_ids=prompt_after_hashed(num_tokens, tail),
                max_tokens=max_tokens,
                priority=priority,
                session_id=session_id,
                prompt_block_hashes=hashes,
                unshared=unshared,
            )
        request.timeout_s = self._timeout
        return request

    def _redraw_prompt(self, index: int) -> list[int]:
        """The prompt of single-turn session ``index`` (as :meth:`_drawn_ahead` draws it)."""
        plan = self._planner.plan(index, 1, None)
        return self._planner.next_request(plan, "", 0.0).prompt_token_ids

    def _send_turn(self, plan: SessionPlan) -> None:
        if not self._time_left():
            return
        assert self._env is not None
        request_id = f"req-{self.num_submitted}"
        request = self._planner.next_request(plan, request_id, float(self._env.now))
        request.timeout_s = self._timeout
        if plan.has_more() or plan.client is not None:
            self._live[request_id] = plan
        self._emit(request)

    def on_finish(self, request_id: str, output_token_ids: list[int], now: float) -> None:
        """Send the session's next turn, or the client's next session, after think time."""
        plan = self._live.pop(request_id, None)
        if plan is None:
            return
        if plan.has_more():
            plan.context = plan.context + list(output_token_ids)
            think = self.workload_spec.sessions.think_time_s if self.workload_spec.sessions else 0.0
            self._after(think, lambda: self._send_turn(plan))
        elif plan.client is not None:
            arrival = self.workload_spec.arrival
            assert isinstance(arrival, ClosedLoopArrival)
            self._after(arrival.think_time_s, lambda: self._start_session(plan.client))
        else:
            plan.context = []

    def on_abort(self, request_id: str, now: float) -> None:
        """An aborted turn ends its session (no later turn); a closed-loop client
        goes on with its next session."""
        plan = self._live.get(request_id)
        if plan is not None:
            plan.stop()
        self.on_finish(request_id, [], now)
