"""What a per-replica rate makes of a candidate: replicas, GPUs, cost, score; and the
ranking.

With a target rate ``T`` (req/s), a candidate serving ``r`` req/s per replica on
``tp`` GPUs needs ``replicas = ceil(T / r)``, ``gpus = replicas * tp`` and costs
``gpus * price`` USD per hour. Objective ``cost``: the score is that cost, or the GPU
count when some GPU of the space has no price (costs of different GPUs cannot be
compared then); ``headroom`` is ``replicas * r / T - 1``. Objective
``goodput_per_gpu``: the score is ``-r / tp`` (more req/s per GPU is better). Lower
scores rank first; ties go to more headroom, then the candidate's key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Scoring:
    """How scores are computed: ``objective``, ``target_rate`` (req/s or None) and
    ``by_price`` (True: USD per hour; False: GPUs)."""

    objective: str
    target_rate: float | None
    by_price: bool

    def replicas(self, rate: float) -> int | None:
        """Replicas needed at the target for a per-replica ``rate`` (None without a
        target)."""
        if self.target_rate is None or rate <= 0:
            return None
        return max(1, math.ceil(self.target_rate / rate - 1e-9))

    def score(
        self, rate: float | None, tp: int, price: float | None, replicas: int | None = None
    ) -> float:
        """The score of a candidate serving ``rate`` req/s per replica (``inf``
        without a rate); ``replicas`` overrides ``ceil(target / rate)`` (a check that
        needed more)."""
        if rate is None or rate <= 0:
            return math.inf
        if self.objective == "goodput_per_gpu":
            return -rate / tp
        count = replicas if replicas is not None else self.replicas(rate)
        assert count is not None
        gpus = count * tp
        if self.by_price:
            return gpus * (price if price is not None else math.inf)
        return float(gpus)

    def headroom(self, rate: float, replicas: int | None) -> float | None:
        """Spare capacity at the target: ``replicas * rate / target - 1``."""
        if self.target_rate is None or replicas is None:
            return None
        return replicas * rate / self.target_rate - 1.0


def rank_key(entry: dict) -> tuple[float, float, str]:
    """Sort key of a searched candidate's entry (see the module docstring)."""
    headroom = entry.get("headroom")
    return (entry["score"], -(headroom if headroom is not None else 0.0), entry["key"])
