"""A workload of load stages and/or a fixed prompt pool (the benchmark shapes).

Stages run in order; each has its own arrival process and ends when it sent its
``num_requests`` or when its ``duration_s`` (from its own start) ran out. The next
stage starts then (``start: after_previous``) or once every request of the stage
before it finished, was aborted or was rejected (``start: after_drain``), and
``delay_s`` seconds after that. A closed-loop
client of a stage that ended sends nothing more. Open-loop stage ``s`` draws its
arrival gaps from the stream ``(seed, arrivals, s)``; a workload without ``stages`` is
one stage whose arrivals are those of :class:`workloads.synthetic.SyntheticWorkload`
(``(seed, arrivals)``).

Every send is one request. Send ``k`` (from 0, over all stages) takes the pool prompt
that :class:`workloads.pool.PoolOrder` picks, or without a pool what single-turn
session ``k`` draws. Each request carries its stage's ``timeout_s`` (else the
workload's).
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import simpy

from workloads.arrivals import arrival_times
from workloads.feed import ArrivalFeed, At
from workloads.pool import PoolOrder, draw_pool
from workloads.process import Chunks
from workloads.request import SimRequest
from workloads.spec import WorkloadSpec
from workloads.spec_arrivals import ClosedLoopArrival
from workloads.spec_bench import Stage
from workloads.synthetic import SyntheticWorkload
from workloads.tokens import TAG_ARRIVALS, stream


class StagedWorkload(SyntheticWorkload):
    """Requests of a spec with ``stages`` or a ``prompt_pool``; see the module docstring."""

    def __init__(
        self,
        spec: WorkloadSpec,
        name: str,
        base_dir: Path | str,
        file: str,
        resolved: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(spec, name, base_dir, file, resolved)
        self.num_requests = spec.total_requests
        self.stage_list: list[Stage] = spec.all_stages
        self.reacts_to_finish = any(
            isinstance(s.arrival, ClosedLoopArrival) or s.start == "after_drain"
            for s in self.stage_list
        )
        pool = spec.prompt_pool
        self._pool = draw_pool(pool, self._planner, spec.seed, spec.vocab_size) if pool else None
        self._order = PoolOrder(pool.order, pool.num_prompts, spec.seed) if pool else None
        self._stage = -1  # the stage sending now (-1: none yet)
        self._open = False  # whether stage ``_stage`` still sends
        self._stage_sent = 0
        self._owner: dict[str, int] = {}  # request id -> its stage, until it ends
        self._clients: dict[str, int] = {}  # request id -> its closed-loop client
        self._outstanding = [0] * len(self.stage_list)
        self._draining = -1  # the stage whose drain the next stage waits for

    def draw_ahead(self, prepare: Any = None) -> None:
        """Nothing is drawn ahead: sends depend on the stage sequence."""
        return None

    # -- SimPy side -----------------------------------------------------------

    def open_feed(self, at: At) -> ArrivalFeed | None:
        """None: stages start on their own clocks (no feed)."""
        return None

    def _begin(self, env: simpy.Environment, ahead: Chunks | None) -> None:
        self._start_stage(0)

    def _start_stage(self, s: int) -> None:
        assert self._env is not None
        stage = self.stage_list[s]
        self._stage, self._open, self._stage_sent = s, True, 0
        if isinstance(stage.arrival, ClosedLoopArrival):
            for client in range(stage.arrival.concurrency):
                self._after(0.0, lambda c=client: self._client_send(s, c))
        else:
            self._env.process(self._open_loop_stage(self._env, s))
        if stage.duration_s is not None:
            self._after(stage.duration_s, lambda: self._end_stage(s))

    def _open_loop_stage(
        self, env: simpy.Environment, s: int
    ) -> Generator[simpy.Event, None, None]:
        stage = self.stage_list[s]
        arrival = stage.arrival
        assert not isinstance(arrival, ClosedLoopArrival)
        keys = (s,) if self.workload_spec.stages is not None else ()
        rng = stream(self.workload_spec.seed, TAG_ARRIVALS, *keys)
        start = env.now
        for when in arrival_times(arrival, rng):
            if stage.duration_s is not None and when >= stage.duration_s:
                return
            if start + when > env.now:
                yield env.timeout(start + when - env.now)
            if not self._sending(s):
                return
            self._send(s, None)

    def _sending(self, s: int) -> bool:
        return self._stage == s and self._open

    def _client_send(self, s: int, client: int) -> None:
        if self._sending(s):
            self._send(s, client)

    def _send(self, s: int, client: int | None) -> None:
        assert self._env is not None
        now = float(self._env.now)
        request_id = f"req-{self.num_submitted}"
        if self._pool is not None:
            assert self._order is not None
            tokens, max_tokens, priority = self._pool[self._order.next()]
            request = SimRequest(request_id, now, list(tokens), max_tokens, priority)
        else:
            plan = self._planner.plan(self._next_session, 1, None)
            request = self._planner.next_request(plan, request_id, now)
        self._next_session += 1
        self._planned += 1
        self._stage_sent += 1
        request.timeout_s = self.workload_spec.stage_timeout(self.stage_list[s])
        self._owner[request_id] = s
        self._outstanding[s] += 1
        if client is not None:
            self._clients[request_id] = client
        self._emit(request)  # a rejected request ends inside (on_finish)
        limit = self.stage_list[s].num_requests
        if limit is not None and self._stage_sent >= limit:
            self._end_stage(s)

    def _end_stage(self, s: int) -> None:
        """Stage ``s`` sends no more; start the next one now or after the drain."""
        if not self._sending(s):
            return
        self._open = False
        if s + 1 == len(self.stage_list):
            self._mark_done()
        elif self.stage_list[s + 1].start == "after_drain" and self._outstanding[s] > 0:
            self._draining = s
        else:
            self._next_stage(s + 1)

    def _next_stage(self, s: int) -> None:
        """Start stage ``s`` now, or after its ``delay_s``."""
        delay = self.stage_list[s].delay_s
        if delay > 0:
            self._after(delay, lambda: self._start_stage(s))
        else:
            self._start_stage(s)

    def on_finish(self, request_id: str, output_token_ids: list[int], now: float) -> None:
        """Count the request out of its stage: the closed-loop client sends its next
        request after think time, a drained stage lets the next one start."""
        s = self._owner.pop(request_id, None)
        if s is None:
            return
        self._outstanding[s] -= 1
        client = self._clients.pop(request_id, None)
        if client is not None and self._sending(s):
            arrival = self.stage_list[s].arrival
            assert isinstance(arrival, ClosedLoopArrival)
            self._after(arrival.think_time_s, lambda: self._client_send(s, client))
        if self._draining == s and self._outstanding[s] == 0:
            self._draining = -1
            self._after(0.0, lambda: self._next_stage(s + 1))

    def on_abort(self, request_id: str, now: float) -> None:
        """An aborted request ends as a finish does (its client goes on)."""
        self.on_finish(request_id, [], now)
