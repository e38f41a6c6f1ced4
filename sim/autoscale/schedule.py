"""Replicas per window, and when each replica is routable.

``need[w] = max(min_replicas, ceil(rate[w] * (1 + headroom) / replica_rate))``: the
replicas window ``w``'s arrival rate needs, ``replica_rate`` being the highest rate one
replica serves within the SLOs (``kvsim plan --question max_rate`` at the workload's
mix). Replica ``k`` is needed in the windows where ``k < need[w]``.

The autoscaler follows that schedule. It asks for a replica ``lead_s`` before a stretch
of windows that needs it, and the replica takes ``scale_up_delay_s`` to start (weights
loaded, warm-up done) before the router may send it requests. A replica that is no
longer needed stays routable ``scale_down_delay_s`` longer, then takes no new requests,
finishes the ones it holds and stops. Replicas needed from the first window are running
at time 0. Replica 0 is always needed (``min_replicas >= 1``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.autoscale.windows import Window


@dataclass(frozen=True)
class Interval:
    """``[start_s, end_s)``; ``end_s`` None: to the end of the run."""

    start_s: float
    end_s: float | None

    def holds(self, t: float) -> bool:
        return self.start_s <= t and (self.end_s is None or t < self.end_s)


@dataclass(frozen=True)
class ReplicaPlan:
    """When one replica is asked for (``requested_s``: billed from then) and when the
    router may use it (``routable``), per stretch of windows that needs it."""

    requested_s: tuple[float, ...]
    routable: tuple[Interval, ...]


@dataclass(frozen=True)
class Schedule:
    """Replicas needed per window and each replica's plan."""

    windows: tuple[Window, ...]
    need: tuple[int, ...]
    replicas: tuple[ReplicaPlan, ...]

    @property
    def peak(self) -> int:
        return max(self.need)

    def routable_at(self, t: float) -> list[int]:
        """The replicas the router may use at time ``t`` (replica 0 always)."""
        out = [k for k, r in enumerate(self.replicas) if any(i.holds(t) for i in r.routable)]
        return out or [0]


def replicas_needed(
    windows: list[Window],
    replica_rate: float | list[float],
    headroom: float,
    min_replicas: int,
) -> list[int]:
    """``need`` per window (see the module docstring); ``replica_rate``: one capacity, or
    one per window (its request mix's)."""
    rates = list(replica_rate) if isinstance(replica_rate, list) else [replica_rate] * len(windows)
    if not all(r > 0 for r in rates):
        raise ValueError(f"--replica-rate: must be > 0 req/s (got {min(rates)})")
    if headroom < 0:
        raise ValueError(f"--headroom: must be >= 0 (got {headroom})")
    if min_replicas < 1:
        raise ValueError(f"--min-replicas: must be >= 1 (got {min_replicas})")
    return [
        max(min_replicas, math.ceil(w.rate * (1.0 + headroom) / r - 1e-9))
        for w, r in zip(windows, rates)
    ]


def build_schedule(
    windows: list[Window],
    need: list[int],
    *,
    scale_up_delay_s: float,
    scale_down_delay_s: float = 0.0,
    lead_s: float = 0.0,
) -> Schedule:
    """Each replica's plan from ``need`` (see the module docstring)."""
    for name, v in (
        ("--scale-up-delay-s", scale_up_delay_s),
        ("--scale-down-delay-s", scale_down_delay_s),
        ("--lead-s", lead_s),
    ):
        if v < 0:
            raise ValueError(f"{name}: must be >= 0 seconds (got {v})")
    plans = []
    last = len(windows) - 1
    for k in range(max(need)):
        requested: list[float] = []
        routable: list[Interval] = []
        w = 0
        while w <= last:
            if need[w] <= k:
                w += 1
                continue
            first = w
            while w <= last and need[w] > k:
                w += 1
            start = windows[first].start_s
            if first == 0:
                ask, on = 0.0, 0.0
            else:
                ask = max(0.0, start - lead_s)
                on = max(start, ask + scale_up_delay_s)
            off = None if w > last else windows[w].start_s + scale_down_delay_s
            if off is not None and off <= on:
                continue  # it would start after it is no longer needed
            if routable and routable[-1].end_s is not None and on <= routable[-1].end_s:
                # still routable from the last stretch: extend it
                routable[-1] = Interval(routable[-1].start_s, off)
                continue
            requested.append(ask)
            routable.append(Interval(on, off))
        plans.append(ReplicaPlan(tuple(requested), tuple(routable)))
    return Schedule(tuple(windows), tuple(need), tuple(plans))
