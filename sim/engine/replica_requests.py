"""The requests a replica's engine holds: arrivals not yet admitted, client timeouts
and the aborts they cause, and each running request's note for its record.

:class:`ReplicaRequests` is the base of :class:`sim.engine.replica.ReplicaEngine`; the
engine loops call :meth:`ReplicaRequests._admit_pending` and
:meth:`ReplicaRequests._apply_aborts` before every ``schedule()``, as vLLM 0.33.0's
engine core drains its input queue.

A request with ``timeout_s`` that has not finished ``timeout_s`` seconds after it
arrived is aborted as vLLM 0.33.0 aborts a request whose client went away: the
engine core calls ``Scheduler.finish_requests([id], FINISHED_ABORTED)``
(``EngineCore.abort_requests``), before the next ``schedule()`` (the input queue) or,
when a step is running, before that step's output is applied (the aborts queue);
output of an aborted request still in flight is dropped. A request not yet admitted
is dropped from the queue of arrivals. Fast-forward is off for such workloads (a
stretch could not stop at an abort in the middle of a step). Units: seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import simpy

from kvcore.request import Request, RequestStatus
from sim.engine.replica_parts import ReplicaParts, RequestMeta, kvcore_request


class ReplicaRequests:
    """One replica's arrivals, aborts and running requests' notes (seconds)."""

    def __init__(self, parts: ReplicaParts) -> None:
        self.env = parts.env
        self.replica_id = parts.replica_id
        self.scheduler = parts.scheduler
        self.hasher = parts.hasher
        self.requests = parts.requests
        self.workload = parts.workload
        self.on_finish: Callable[[str, list[int], float], None] = parts.workload.on_finish
        self.arrivals_done: Callable[[], bool] = parts.workload.done
        self.on_progress = parts.on_progress
        self.max_model_len = parts.scheduler.max_model_len
        self.num_rejected = 0
        self.num_aborted = 0
        self._aborts: list[str] = []  # ids whose client gave up, not yet aborted
        self._pending: list[Any] = []
        self._meta: dict[str, RequestMeta] = {}
        self._wake = parts.env.event()

    def submit(self, sim_request: Any) -> None:
        """Hand a request to this replica (it joins the queue before the next step)."""
        if sim_request.num_prompt_tokens >= self.max_model_len:
            # vLLM rejects such prompts at the API; the request never runs (and its
            # token ids, when the workload defers them, are never built).
            self.num_rejected += 1
            self.on_finish(sim_request.request_id, [], self.env.now)
            return
        self._pending.append(sim_request)
        if sim_request.timeout_s is not None:
            rid = sim_request.request_id
            timer = self.env.timeout(sim_request.timeout_s)
            timer.callbacks.append(lambda _event: self._timed_out(rid))
        if not self._wake.triggered:
            self._wake.succeed()

    def _timed_out(self, rid: str) -> None:
        """The client of ``rid`` gives up now: abort it at the engine's next chance."""
        if rid in self._meta or any(sr.request_id == rid for sr in self._pending):
            self._aborts.append(rid)
            if not self._wake.triggered:
                self._wake.succeed()

    def _apply_aborts(self) -> None:
        """Abort the requests whose clients gave up, one ``finish_requests`` call each
        (in the order they timed out), as vLLM's ``EngineCore.abort_requests``."""
        now = self.env.now
        aborts, self._aborts = self._aborts, []
        for rid in aborts:
            queued = next((sr for sr in self._pending if sr.request_id == rid), None)
            if queued is not None:  # never admitted: gone before the engine saw it
                self._pending.remove(queued)
                self._meta[rid] = RequestMeta(queued.arrival_s, queued.num_prompt_tokens)
                self._aborted(rid, 0, 0, 0, now)
                continue
            for req in self.scheduler.finish_requests(rid, RequestStatus.FINISHED_ABORTED):
                self._aborted(
                    rid,
                    req.num_output_tokens,
                    max(req.num_cached_tokens, 0),
                    req.num_preemptions,
                    now,
                )

    def _aborted(
        self, rid: str, output_tokens: int, cached_tokens: int, preemptions: int, now: float
    ) -> None:
        self.num_aborted += 1
        self._close(self.requests.add_aborted, rid, output_tokens, cached_tokens, preemptions, now)
        self.workload.on_abort(rid, now)

    def _close(
        self,
        add: Callable[..., None],
        rid: str,
        output_tokens: int,
        cached_tokens: int,
        preemptions: int,
        now: float,
    ) -> None:
        """Write ``rid``'s requests.csv row with the recorder's ``add`` (finished or
        aborted at ``now``, s) and count it as done."""
        m = self._meta.pop(rid)
        add(
            rid,
            self.replica_id,
            m.arrival_s,
            m.first_token_s,
            now,
            m.prompt_tokens,
            output_tokens,
            cached_tokens,
            preemptions,
        )
        if self.on_progress is not None:
            self.on_progress(1)

    @property
    def num_outstanding(self) -> int:
        """Requests submitted and not finished."""
        return len(self._pending) + self.scheduler.get_num_unfinished_requests()

    @property
    def has_pending(self) -> bool:
        """Whether arrivals wait to be added before the next ``schedule()``."""
        return bool(self._pending)

    def _admit_pending(self) -> None:
        self._add_arrivals(self.pending_requests())

    def _add_arrivals(self, reqs: list[Request]) -> None:
        """Add the arrivals to the scheduler (``reqs``: :meth:`pending_requests`)."""
        add = self.scheduler.add_request
        for req in reqs:
            add(req)
        self.joined(reqs)

    def pending_requests(self) -> list[Request]:
        """The kvcore requests of the arrivals waiting to be added, as they are added
        now (their arrival in the engine: now)."""
        now = self.env.now
        hasher = self.hasher
        return [kvcore_request(sr, now, hasher) for sr in self._pending]

    def joined(self, reqs: list[Request]) -> None:
        """The arrivals (``reqs``: :meth:`pending_requests`) went to the scheduler, by
        ``add_request`` or a stretch that admits them: note each for its record and
        empty the queue of arrivals."""
        self.fed(self._pending, reqs)
        self._pending.clear()

    def fed(self, srs: list[Any], reqs: list[Request]) -> None:
        """Requests ``srs`` (``reqs``: their kvcore requests) went to the scheduler, each
        at its arrival (``arrival_s``; the workload's feed's, taken ahead by a stretch,
        or the arrivals :meth:`joined` takes): note each for its record."""
        meta = self._meta
        for sr, req in zip(srs, reqs):
            meta[sr.request_id] = RequestMeta(sr.arrival_s, req.num_prompt_tokens)

    def _idle(self) -> simpy.Event:
        """An event that fires at the next submit, or when arrivals end."""
        self._wake = self.env.event()
        done = getattr(self.workload, "all_submitted", None)
        if done is not None and not done.triggered:
            return self._wake | done
        return self._wake

    def note_first_token(self, rid: str, now: float) -> None:
        """``rid``'s first token comes at ``now`` (s) unless an earlier one did."""
        m = self._meta[rid]
        if m.first_token_s < 0:
            m.first_token_s = now

    def finish_request(self, req: Request, now: float) -> None:
        """Record ``req``, finished at ``now`` (s), and tell the workload."""
        rid = req.request_id
        self._close(
            self.requests.add,
            rid,
            req.num_output_tokens,
            max(req.num_cached_tokens, 0),
            req.num_preemptions,
            now,
        )
        self.on_finish(rid, req.output_token_ids, now)
