"""Routers: which replica of a cluster gets an arriving request.

A router sees each replica through a small read-only view (:class:`ReplicaView`):
its outstanding request count, its KV-cache usage and, for prefix-aware routing, how
many of a request's prompt tokens its prefix cache holds right now (from the
replica's actual ``BlockPool``). Every router is deterministic: ties go to the
replica with the fewest outstanding requests, then to the lowest replica index.

Routers (``ROUTERS``):

- ``round_robin``: replicas in turn, regardless of load.
- ``least_outstanding``: fewest outstanding (submitted, unfinished) requests.
- ``least_kv``: lowest KV-cache usage (fraction of blocks in use).
- ``prefix_aware``: longest cached prefix of the request's prompt blocks, among the
  replicas within a load cap: a replica is eligible when its outstanding count is at
  most ``floor(min_outstanding * (1 + load_slack)) + headroom`` (defaults 0.5 and 2),
  so a hot prefix cannot pile every request onto one replica.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol


class ReplicaView(Protocol):
    """What a router may read about one replica."""

    @property
    def num_outstanding(self) -> int:
        """Requests submitted to the replica and not finished."""
        ...

    @property
    def kv_usage(self) -> float:
        """Fraction of the replica's usable KV blocks in use, in [0, 1]."""
        ...

    def cached_prefix_tokens(self, request: object) -> int:
        """Prompt tokens of ``request`` (a routed request) the prefix cache holds."""
        ...


class Router:
    """Base class: ``choose(request, replicas)`` returns a replica index."""

    name = "router"
    needs_prefix = False
    """True when ``choose`` calls ``cached_prefix_tokens`` (the cluster then hashes
    the request's prompt once at routing time)."""

    def choose(self, request: object, replicas: Sequence[ReplicaView]) -> int:
        raise NotImplementedError


def _least_loaded(replicas: Sequence[ReplicaView], among: Sequence[int]) -> int:
    return min(among, key=lambda i: (replicas[i].num_outstanding, i))


class RoundRobinRouter(Router):
    """Replica 0, 1, ..., N-1, 0, ... in arrival order."""

    name = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    def choose(self, request: object, replicas: Sequence[ReplicaView]) -> int:
        i = self._next % len(replicas)
        self._next = i + 1
        return i


class LeastOutstandingRouter(Router):
    """Fewest outstanding requests; ties to the lowest index."""

    name = "least_outstanding"

    def choose(self, request: object, replicas: Sequence[ReplicaView]) -> int:
        return _least_loaded(replicas, range(len(replicas)))


class LeastKVRouter(Router):
    """Lowest KV-cache usage; ties to fewest outstanding, then the lowest index."""

    name = "least_kv"

    def choose(self, request: object, replicas: Sequence[ReplicaView]) -> int:
        return min(
            range(len(replicas)),
            key=lambda i: (replicas[i].kv_usage, replicas[i].num_outstanding, i),
        )


class PrefixAwareRouter(Router):
    """Longest cached prefix among replicas under a load cap.

    Ties (including "no replica caches anything") go to the least outstanding
    replica, then the lowest index.
    """

    name = "prefix_aware"
    needs_prefix = True

    def __init__(self, load_slack: float = 0.5, headroom: int = 2) -> None:
        if load_slack < 0 or headroom < 0:
            raise ValueError("prefix_aware: load_slack and headroom must be >= 0")
        self.load_slack = load_slack
        self.headroom = headroom

    def load_cap(self, min_outstanding: int) -> int:
        """Most outstanding requests an eligible replica may have."""
        return math.floor(min_outstanding * (1.0 + self.load_slack)) + self.headroom

    def choose(self, request: object, replicas: Sequence[ReplicaView]) -> int:
        loads = [r.num_outstanding for r in replicas]
        cap = self.load_cap(min(loads))
        eligible = [i for i, n in enumerate(loads) if n <= cap]
        hits = {i: replicas[i].cached_prefix_tokens(request) for i in eligible}
        return min(eligible, key=lambda i: (-hits[i], loads[i], i))


ROUTERS: dict[str, Callable[[], Router]] = {
    "round_robin": RoundRobinRouter,
    "least_outstanding": LeastOutstandingRouter,
    "least_kv": LeastKVRouter,
    "prefix_aware": PrefixAwareRouter,
}


def make_router(name: str) -> Router:
    """A fresh router by name; ValueError naming the allowed values otherwise."""
    try:
        return ROUTERS[name]()
    except KeyError:
        raise ValueError(
            f"router: unknown router {name!r}; allowed: {', '.join(ROUTERS)}"
        ) from None
