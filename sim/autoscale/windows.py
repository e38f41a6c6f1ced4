"""The arrival rate and request mix of a workload, window by window.

The workload is drawn on its own (no engine): its requests arrive at the times the
simulation will see (same seed), so the windows describe exactly that traffic. Only
open-loop workloads qualify: a closed loop or a session's next turn depends on when the
engine finishes the last one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import simpy

from workloads.loader import load_workload


@dataclass(frozen=True)
class Window:
    """Arrivals in ``[start_s, end_s)``: their count, rate (req/s) and mean lengths."""

    start_s: float
    end_s: float
    num_requests: int
    mean_prompt_tokens: float
    mean_output_tokens: float

    @property
    def rate(self) -> float:
        return self.num_requests / (self.end_s - self.start_s)


@dataclass(frozen=True)
class Arrivals:
    """Every request's arrival time (s), prompt and output lengths (tokens)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray


def draw_arrivals(workload: str, seed: int | None) -> Arrivals:
    """The requests ``workload`` sends with ``seed``, without an engine."""
    w = load_workload(workload, seed=seed)
    if w.reacts_to_finish:
        raise ValueError(
            f"{workload}: a closed-loop or session workload has no arrival rate of its own "
            "(its next request waits for the last one); autoscale needs open-loop arrivals"
        )
    env = simpy.Environment()
    times: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []

    def submit(sr: object) -> None:
        times.append(float(env.now))
        prompts.append(int(sr.num_prompt_tokens))  # type: ignore[attr-defined]
        outputs.append(int(sr.max_tokens))  # type: ignore[attr-defined]

    w.start(env, submit)
    env.run()
    if not times:
        raise ValueError(f"{workload}: sends no requests")
    return Arrivals(np.array(times), np.array(prompts), np.array(outputs))


def arrival_windows(arrivals: Arrivals, window_s: float) -> list[Window]:
    """Windows of ``window_s`` seconds from 0 to the last arrival."""
    if not window_s > 0:
        raise ValueError(f"--window-s: must be > 0 seconds (got {window_s})")
    last = float(arrivals.arrival_s.max())
    n = max(1, math.ceil((last + 1e-9) / window_s))
    index = np.minimum((arrivals.arrival_s // window_s).astype(np.int64), n - 1)
    out = []
    for i in range(n):
        sel = index == i
        count = int(sel.sum())
        out.append(
            Window(
                start_s=i * window_s,
                end_s=(i + 1) * window_s,
                num_requests=count,
                mean_prompt_tokens=float(arrivals.prompt_tokens[sel].mean()) if count else 0.0,
                mean_output_tokens=float(arrivals.output_tokens[sel].mean()) if count else 0.0,
            )
        )
    return out
