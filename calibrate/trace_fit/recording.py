"""A latency model that records what the engine asks it, step by step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from calibrate.latency_interface import LatencyModel
from calibrate.roofline import RooflineLatencyModel
from calibrate.roofline_terms import TERMS, RooflineTerms


class RecordingLatency(LatencyModel):
    """``inner``'s step times; the terms of every step asked for, in order.

    Its kind is not ``roofline``, so the engine has no scalar shortcut and asks this
    model for every step it runs (with fast-forward off, once per step: the async loop,
    or the sync loop without fast-forward)."""

    kind = "recording"

    def __init__(self, inner: RooflineLatencyModel) -> None:
        self.inner = inner
        self.terms = RooflineTerms(inner)
        self._rows: list[np.ndarray] = []
        self.durations: list[float] = []

    @property
    def groups(self) -> Any:
        """The inner model's attention groups (the engine reads their windows)."""
        return self.inner.groups

    def step_time(self, new_tokens: np.ndarray, context_tokens: np.ndarray) -> float:
        d = self.inner.step_time(new_tokens, context_tokens)
        self._rows.append(self.terms.step(new_tokens, context_tokens)[None, :])
        self.durations.append(d)
        return d

    def decode_step_times(
        self,
        batch_sizes: np.ndarray,
        total_context: np.ndarray,
        windowed_context: Mapping[int, np.ndarray] | None = None,
    ) -> np.ndarray:
        d = self.inner.decode_step_times(batch_sizes, total_context, windowed_context)
        self._rows.append(self.terms.decode(batch_sizes, total_context, windowed_context))
        self.durations.extend(d.tolist())
        return d

    def matrix(self) -> np.ndarray:
        """``[steps asked for, len(TERMS)]``."""
        if not self._rows:
            return np.zeros((0, len(TERMS)))
        return np.concatenate(self._rows, axis=0)

    def describe(self) -> dict[str, object]:
        return self.inner.describe()
