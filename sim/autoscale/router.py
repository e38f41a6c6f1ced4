"""A router that sends each request only to the replicas its schedule has routable."""

from __future__ import annotations

from collections.abc import Sequence

from sim.autoscale.schedule import Schedule
from sim.engine.router import ReplicaView, Router


def _arrival(request: object) -> float | None:
    """When ``request`` arrived: a workload request's ``arrival_s`` or a kvcore
    request's ``arrival_time`` (a prefix-aware router sees the latter)."""
    for name in ("arrival_s", "arrival_time"):
        value = getattr(request, name, None)
        if value is not None:
            return float(value)
    return None


class ScheduledRouter(Router):
    """``inner`` over the replicas ``schedule`` has routable at the request's arrival."""

    def __init__(self, inner: Router, schedule: Schedule) -> None:
        self.inner = inner
        self.schedule = schedule
        self.name = f"{inner.name} (scheduled)"
        self.needs_prefix = inner.needs_prefix
        self._now = 0.0

    def choose(self, request: object, replicas: Sequence[ReplicaView]) -> int:
        t = _arrival(request)
        if t is not None:
            self._now = t
        active = self.schedule.routable_at(self._now)
        return active[self.inner.choose(request, [replicas[k] for k in active])]
