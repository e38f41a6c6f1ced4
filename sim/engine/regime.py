"""Which regime a replica's engine runs, decided once where the engines are built.

Three regimes, each exact (the same records, byte for byte):

- **stepped**: every step is scheduled, timed and applied one by one;
- **fast-forward, step by step** (several replicas): decode stretches are advanced at
  once (:mod:`kvcore.fast_forward`), but each of their steps keeps its own SimPy event
  and writes its row when it ends, so rows interleave across replicas as they do when
  stepping;
- **fast-forward, chained** (one replica, the only writer of the records): a stretch is
  one event at its end, its rows written in bulk; with a workload that does not react
  to finishes the stretches after a finishing step are chained on at once.

:func:`decide_regime` says which, from the run's parts; the engine
(:class:`sim.engine.replica.ReplicaEngine`) only reads the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EngineRegime:
    """What one engine may do at once (see the module docstring)."""

    fast_forward: bool
    """Decode-only stretches are advanced at once."""
    one_writer: bool
    """The engine is the only one writing the step and request records (one replica)."""
    reacts_to_finish: bool
    """The workload may submit when a request finishes (a closed loop, sessions): a
    stretch never runs past a step in which requests finish."""
    vector_decode: bool
    """Decode-only steps are timed with the vectorized formula, bit-identical with a
    stretch's timing: where it is exact (no sliding-window attention anywhere)."""

    @property
    def chained(self) -> bool:
        """A step ending before the next event is applied at once and the stretches
        after it are chained on, in one wait (one writer, a workload that does not
        react to finishes)."""
        return self.fast_forward and self.one_writer and not self.reacts_to_finish


def stepping_part(*, offload: bool, spec: bool, lockstep: bool) -> str | None:
    """The part of a run that needs every step stepped, or None: the CPU offload
    tier (every step has its transfers), speculative decoding (stretches assume one
    token per request per step) or DP lockstep (a stretch would step one rank without
    the others)."""
    if offload:
        return "the CPU offload tier"
    if spec:
        return "speculative decoding"
    if lockstep:
        return "DP lockstep"
    return None


def decide_regime(
    *,
    fast_forward: bool,
    num_replicas: int,
    scheduler: Any,
    latency_model: Any,
    workload: Any,
    stepped_by: str | None = None,
) -> EngineRegime:
    """The regime of one replica's engine.

    ``fast_forward``: whether the run allows it (``--no-fast-forward`` does not);
    ``num_replicas``: the replicas writing the same records; ``scheduler``, its KV
    cache groups (stretches and the vectorized decode timing need full attention
    only); ``latency_model``, its groups (no sliding window); ``workload``: whether it
    reacts to finishes (unknown workloads: assume it may) and has client timeouts
    (stretches cannot stop at an abort in the middle of a step); ``stepped_by``: the
    part of the run that needs every step stepped (:func:`stepping_part`), or None.
    """
    windows = any(getattr(g, "window", None) for g in getattr(latency_model, "groups", ()))
    vector_decode = not windows and scheduler.kv_cache_manager.full_attention_managers is not None
    timeouts = bool(getattr(workload, "has_timeouts", False))
    return EngineRegime(
        fast_forward=fast_forward and vector_decode and not timeouts and stepped_by is None,
        one_writer=num_replicas == 1,
        reacts_to_finish=bool(getattr(workload, "reacts_to_finish", True)),
        vector_decode=vector_decode,
    )
