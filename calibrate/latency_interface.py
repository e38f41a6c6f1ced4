"""The step-time interface every latency model implements (pure numpy).

One engine step runs one forward pass over the scheduled requests. A request in the step
is described by two numbers: ``new_tokens`` (tokens computed in this step: the prefill
chunk, or 1 for a decode) and ``context_tokens`` (tokens already in its KV cache before
the step, prefix-cache hits included). Times are seconds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

import numpy as np


class LatencyModel(ABC):
    """Seconds one engine step takes, from what the step schedules."""

    #: ``"roofline"``, ``"constant"`` or ``"fitted"``.
    kind: str = ""

    @abstractmethod
    def step_time(self, new_tokens: np.ndarray, context_tokens: np.ndarray) -> float:
        """Seconds for one step; arrays are per scheduled request (same length):
        tokens computed in this step and tokens in the KV cache before it."""

    @abstractmethod
    def decode_step_times(
        self,
        batch_sizes: np.ndarray,
        total_context: np.ndarray,
        windowed_context: Mapping[int, np.ndarray] | None = None,
    ) -> np.ndarray:
        """Seconds for each of many decode-only steps (vectorized, for fast-forward).

        ``batch_sizes[i]`` requests each compute one token in step ``i``;
        ``total_context[i]`` is the sum of their ``context_tokens``. Models with
        sliding-window layers also take ``windowed_context[W][i]`` = the sum over the
        step's requests of ``min(context + 1, W)`` for each window ``W`` (tokens each
        query attends to); without it they bound it by ``min(total + B, B * W)``.
        Equals ``step_time`` on the same decode batch (given ``windowed_context``).
        """

    def describe(self) -> dict[str, object]:
        """Parameters worth recording in a run's resolved config."""
        return {"kind": self.kind}


def as_token_arrays(new_tokens: object, context_tokens: object) -> tuple[np.ndarray, np.ndarray]:
    """Both arguments as equal-length 1-D int64 arrays of non-negative token counts."""
    new = np.asarray(new_tokens, dtype=np.int64).reshape(-1)
    ctx = np.asarray(context_tokens, dtype=np.int64).reshape(-1)
    if new.shape != ctx.shape:
        raise ValueError(
            f"new_tokens and context_tokens need one entry per request "
            f"(got {new.size} and {ctx.size})"
        )
    if new.size and (new.min() < 0 or ctx.min() < 0):
        raise ValueError("token counts must be >= 0")
    return new, ctx


def as_decode_arrays(batch_sizes: object, total_context: object) -> tuple[np.ndarray, np.ndarray]:
    """Both arguments as equal-length 1-D float64 arrays (counts of tokens/requests)."""
    b = np.asarray(batch_sizes, dtype=np.float64).reshape(-1)
    k = np.asarray(total_context, dtype=np.float64).reshape(-1)
    if b.shape != k.shape:
        raise ValueError(
            f"batch_sizes and total_context need one entry per step (got {b.size} and {k.size})"
        )
    if b.size and (b.min() < 0 or k.min() < 0):
        raise ValueError("batch sizes and context totals must be >= 0")
    return b, k
