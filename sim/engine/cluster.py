"""A cluster: N replica engines (one SimPy process each) behind a router.

The workload submits to :meth:`Cluster.submit`, which asks the router for a replica
and hands the request to that replica's engine. Every engine gets the workload
itself as its callback target: a request lives on exactly one replica, so
``on_finish`` reaches the workload once per request, and each engine waits on the
shared ``done()`` / ``all_submitted`` to know when arrivals are over. All engines
write to the same step and request recorders (rows carry the replica id).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import IO, Any

import simpy

from kvcore.block_hashing import FastBlockHasher, UnkeyedHasher
from sim.engine.input_limits import InputLimits
from sim.engine.replica import ReplicaEngine
from sim.engine.replica_build import ReplicaBuilder
from sim.engine.replica_parts import kvcore_request
from sim.engine.router import Router
from sim.engine.simpy_internals import schedule_at
from sim.engine.stretch_feed import FeedStretchRunner
from sim.records.recorders import StepRecorder
from sim.records.request_recorder import RequestRecorder
from workloads.process import Prepared, Workload


def prepare_prompt(sr: Any, max_model_len: int, hasher: FastBlockHasher) -> Prepared | None:
    """A workload request's prompt as engines of ``max_model_len`` tokens hash it with
    ``hasher``, computed where the workload is drawn (:class:`workloads.process.Prepared`:
    the block hashes, for ``SimRequest.prompt_block_hashes``, and the tokens whose ids
    the engines never read); None for a prompt the engines will reject (at least
    ``max_model_len`` tokens). The token ids of those and of an unshared prompt hashed
    unkeyed are never built."""
    num_tokens = sr.num_prompt_tokens
    if num_tokens >= max_model_len:
        return None
    unkeyed = hasher.for_unshared
    if sr.unshared and isinstance(unkeyed, UnkeyedHasher):
        return Prepared(unkeyed.hashes(num_tokens), num_tokens)
    hashes = kvcore_request(sr, 0.0, hasher).block_hashes
    return Prepared(hashes, len(hashes) * hasher.hash_block_size)


_UNCACHEABLE = object()
"""What a prefix-aware router is shown for a request that will be rejected (its prompt
is at least max_model_len tokens): no replica caches any of it, and its prompt is
never hashed (vLLM rejects it before any cache lookup)."""


class EngineView:
    """The read-only :class:`sim.engine.router.ReplicaView` of one ``ReplicaEngine``."""

    __slots__ = ("engine",)

    def __init__(self, engine: ReplicaEngine) -> None:
        self.engine = engine

    @property
    def num_outstanding(self) -> int:
        return self.engine.num_outstanding

    @property
    def kv_usage(self) -> float:
        return self.engine.scheduler.kv_cache_manager.block_pool.get_usage()

    def cached_prefix_tokens(self, request: object) -> int:
        """Tokens of the (hashed kvcore) request's prompt cached on this replica now."""
        if request is _UNCACHEABLE:
            return 0
        manager = self.engine.scheduler.kv_cache_manager
        return manager.get_computed_blocks(request)[1]


class Cluster:
    """N replicas of one resolved run behind ``router``."""

    def __init__(
        self,
        env: simpy.Environment,
        resolved: Any,
        num_replicas: int,
        router: Router,
        steps: StepRecorder,
        requests: RequestRecorder,
        *,
        check: bool = False,
        decisions: IO[str] | None = None,
        on_progress: Callable[[int], None] | None = None,
        fast_forward: bool = True,
    ) -> None:
        if num_replicas < 1:
            raise ValueError(f"num_replicas: must be >= 1 (got {num_replicas})")
        if steps.num_replicas != num_replicas:
            raise ValueError(
                f"steps: a recorder for {steps.num_replicas} replica(s), not {num_replicas}"
            )
        self.env = env
        self.router = router
        builder = ReplicaBuilder(
            env,
            resolved,
            num_replicas,
            steps,
            requests,
            check=check,
            decisions=decisions,
            on_progress=on_progress,
            fast_forward=fast_forward,
        )
        self.hasher = builder.hasher
        self.engines = [builder.engine(i) for i in range(num_replicas)]
        self.max_model_len: int = resolved.max_model_len
        self.limits = InputLimits(self.max_model_len)
        """Rejected and capped requests (see :mod:`sim.engine.input_limits`)."""
        self.views = [EngineView(e) for e in self.engines]
        self.num_routed = [0] * num_replicas
        if num_replicas == 1:
            self.process: simpy.Event = self.engines[0].process
        else:
            self.process = simpy.AllOf(env, [e.process for e in self.engines])

    def prepare_prompt(self, sr: Any) -> Prepared | None:
        """:func:`prepare_prompt` for this cluster's engines (a workload's ``prepare``)."""
        return prepare_prompt(sr, self.max_model_len, self.hasher)

    def _routing_request(self, sr: Any, rejected: bool) -> Any:
        """The request as the router sees it: hashed into blocks when it needs that."""
        if not self.router.needs_prefix:
            return sr
        if rejected:
            return _UNCACHEABLE
        return kvcore_request(sr, self.env.now, self.hasher)

    def submit(self, sr: Any) -> None:
        """Route one arriving request to a replica (a request the replica will reject
        is routed too: routers see every arrival, as they always have)."""
        rejected = self.limits.observe(sr)
        if len(self.engines) == 1:
            i = 0
        else:
            i = self.router.choose(self._routing_request(sr, rejected), self.views)
        self.num_routed[i] += 1
        self.engines[i].submit(sr)

    def open_feed(self, workload: Workload) -> None:
        """Before ``workload`` starts: with one replica whose engine takes arrivals
        ahead (:class:`sim.engine.stretch_feed.FeedStretchRunner`), let it take them
        from the workload's feed, when it has one; each taken request is counted here
        as :meth:`submit` counts it (the engine does the rest)."""
        if len(self.engines) != 1:
            return
        runner = self.engines[0].stretches
        if not isinstance(runner, FeedStretchRunner):
            return
        feed = workload.open_feed(partial(schedule_at, self.env))
        if feed is not None:
            feed.on_take = self._taken
            runner.use_feed(feed)

    def _taken(self, sr: Any) -> None:
        rejected = self.limits.observe(sr)
        assert not rejected, "an engine takes no request it rejects"
        self.num_routed[0] += 1

    @property
    def num_rejected(self) -> int:
        """Requests rejected by any replica (prompt of at least max_model_len tokens)."""
        return sum(e.num_rejected for e in self.engines)
