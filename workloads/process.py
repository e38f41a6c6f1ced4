"""The interface between a workload and the simulated engine (SimPy).

The engine calls ``start(env, submit)`` once; the workload then calls
``submit(request)`` at each arrival, at simulated time ``env.now`` (seconds). The engine
calls ``on_finish`` when a request completes (or is rejected, with no output tokens),
which lets closed-loop clients and multi-turn sessions send their next request; it
calls ``on_abort`` instead when it aborted a request at its ``timeout_s``. When
``done()`` is true and the engine is idle, the run is over; an idle engine that is not
done waits for the next ``submit`` or for the ``all_submitted`` event (a duration-bound
workload becomes done at ``duration_s`` without a last submit).

Follow-ups triggered by ``on_finish`` are submitted from a later SimPy event (after a
zero or positive think time), never from inside ``on_finish`` itself.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

import simpy

from workloads.feed import ArrivalFeed, At
from workloads.request import SimRequest
from workloads.tokens import token_array

Submit = Callable[[SimRequest], None]


AHEAD_CHUNK = 256
"""Requests per chunk a helper draws ahead, after a smaller first one (~90 kB pickled
at 512 prompt tokens: their 32 block hashes, no ids; see :class:`Prepared`)."""


class Prepared(NamedTuple):
    """What the engine made of a prompt where the workload drew it (a helper process):
    the block hashes of its full blocks (the request's ``prompt_block_hashes``) and how
    many of its leading tokens' ids the engine never reads: those the hashes cover (it
    hashes on from the first block they do not), or all of them (an unshared prompt
    whose blocks are hashed unkeyed, ``kvcore.block_hashing.UnkeyedHasher``). Only the
    ids after them are drawn and travel back to the loop
    (:func:`workloads.trace_rows.prompt_after_hashed`)."""

    block_hashes: list[Any]
    unread_tokens: int


Prepare = Callable[[SimRequest], "Prepared | None"]
"""The engine's work on each request drawn ahead (its prompt hashing), done where it is
drawn; None for a prompt the engine will reject unseen (its ids are then not drawn)."""

DrawnPrompt = tuple[int, "array | None", "list[Any] | None"]
"""A prompt drawn ahead as it travels to the loop: its length, its token ids after those
its block hashes cover (a compact ``array``: it pickles as bytes; None when the engine
will reject the prompt unseen, whose ids are then not drawn), and those hashes (None
without ``prepare``). The loop rebuilds it with
:func:`workloads.trace_rows.prompt_after_hashed`."""


def draw_prompt(req: SimRequest, prepare: Prepare | None, typecode: str) -> DrawnPrompt:
    """``req``'s prompt drawn ahead (:data:`DrawnPrompt`), its ids packed as ``typecode``
    (:func:`workloads.tokens.token_typecode`): all of them without ``prepare``."""
    if prepare is None:
        return req.num_prompt_tokens, token_array(typecode, req.prompt_token_ids), None
    prepared = prepare(req)
    if prepared is None:
        return req.num_prompt_tokens, None, None
    covered = prepared.unread_tokens
    if covered >= req.num_prompt_tokens:  # no id is read: none is drawn
        return req.num_prompt_tokens, array(typecode), prepared.block_hashes
    ids = req.prompt_token_ids
    tail = ids[covered:] if covered else ids
    return len(ids), token_array(typecode, tail), prepared.block_hashes


class Chunks(Protocol):
    """Chunks of :meth:`Workload.draw_ahead` in order: ``next()`` returns the next."""

    def next(self) -> list[Any]: ...


class Workload:
    """Base class of synthetic and trace workloads.

    Attributes:
        name: short name (the preset's, the YAML's ``name`` or its file stem, the trace's).
        spec: the resolved configuration as plain data, for ``config.yaml``.
        num_requests: how many requests will be submitted in all, or None when the
            workload is bounded by a duration instead.
        all_submitted: after ``start``, a SimPy event that fires when ``done()``
            becomes true, for engines that want to wait on it.
        reacts_to_finish: whether ``on_finish`` may lead to a later submit (closed
            loops, sessions). When False, what a run submits and when depends on the
            arrival process alone (fast-forward uses this with several replicas).
        has_timeouts: whether some request carries a ``timeout_s``.
    """

    reacts_to_finish = True
    has_timeouts = False
    """Whether some request may carry a ``timeout_s`` (the engine then arms timers)."""

    def __init__(self, name: str, spec: dict[str, Any], num_requests: int | None) -> None:
        self.name = name
        self.spec = spec
        self.num_requests = num_requests
        self.all_submitted: simpy.Event | None = None
        self._env: simpy.Environment | None = None
        self._submit: Submit | None = None
        self._num_submitted = 0
        self._finished = False
        self._started = False
        self._feed: ArrivalFeed | None = None  # opened by open_feed, where there is one

    @property
    def num_submitted(self) -> int:
        """Requests submitted so far."""
        return self._num_submitted

    def start(self, env: simpy.Environment, submit: Submit, ahead: Chunks | None = None) -> None:
        """Start the SimPy process(es) that call ``submit(req)`` at each arrival.

        ``ahead``: the chunks of :meth:`draw_ahead`, drawn elsewhere (a helper process,
        :mod:`sim.offload`); the workload then takes its requests from them.
        """
        if self._started:
            raise RuntimeError(f"workload {self.name!r} was already started")
        self._started = True
        self._env = env
        self._submit = submit
        self.all_submitted = env.event()
        self._begin(env, ahead)

    def release(self) -> None:
        """Let go of the run once it is over: ``submit`` (the engines behind it), the
        SimPy environment (its processes) and the feed (whose counting reaches the
        engines), so the run's engines and records are freed with the run rather than
        with this workload. It cannot be started again."""
        self._submit = None
        self._env = None
        self.all_submitted = None
        self._feed = None

    def draw_ahead(self, prepare: Prepare | None = None) -> Iterator[list[Any]] | None:
        """Chunks of what this workload will submit, when that does not depend on the
        engine and drawing it dominates (else None). Handed back to :meth:`start` as
        ``ahead``, possibly drawn in another process (a copy of this workload).
        ``prepare(request)`` runs on each request where it is drawn; its hashes become
        the request's ``prompt_block_hashes``, and the prompt's ids they cover are not
        sent (see :class:`Prepared`)."""
        return None

    def locate(self, request_id: str) -> int | None:
        """The file line that ``request_id`` comes from (a trace's), else None."""
        return None

    def open_feed(self, at: At) -> ArrivalFeed | None:
        """Before :meth:`start`: the :class:`workloads.feed.ArrivalFeed` of an open-loop
        workload whose requests an engine may take before their time (``at``: makes
        its process's waits); None when it has none."""
        return None

    def on_finish(self, request_id: str, output_token_ids: list[int], now: float) -> None:
        """The engine finished ``request_id`` at ``now`` seconds with these output tokens."""

    def on_abort(self, request_id: str, now: float) -> None:
        """The engine aborted ``request_id`` at ``now`` seconds (its client timed out);
        by default, as a finish with no output."""
        self.on_finish(request_id, [], now)

    def done(self) -> bool:
        """True when no request will ever be submitted again."""
        return self._finished

    # -- for subclasses -------------------------------------------------------

    def _begin(self, env: simpy.Environment, ahead: Chunks | None) -> None:
        raise NotImplementedError

    def _emit(self, request: SimRequest) -> None:
        """Submit one request now and mark the workload done after the last one."""
        assert self._submit is not None
        self._num_submitted += 1
        self._submit(request)
        if self.num_requests is not None and self._num_submitted >= self.num_requests:
            self._mark_done()

    def _count_taken(self, n: int) -> None:
        """``n`` more requests submitted, taken by the engine from the feed (never the
        last one)."""
        self._num_submitted += n

    def _mark_done(self) -> None:
        if not self._finished:
            self._finished = True
            if self.all_submitted is not None and not self.all_submitted.triggered:
                self.all_submitted.succeed()

    def _after(self, delay: float, action: Callable[[], None]) -> None:
        """Run ``action`` ``delay`` seconds from now (0: in a later event at this time)."""
        assert self._env is not None
        self._env.timeout(max(delay, 0.0)).callbacks.append(lambda _event: action())
