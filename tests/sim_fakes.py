"""Small stand-ins used by the simulator tests: a list-driven workload and latency."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class FakeRequest:
    request_id: str
    arrival_s: float
    prompt_token_ids: list[int]
    max_tokens: int
    priority: int = 0
    lora_id: int | None = None
    cache_salt: str | None = None
    session_id: str | None = None


class ListWorkload:
    """Open-loop arrivals at fixed times; records completions."""

    def __init__(self, requests: list[FakeRequest]) -> None:
        self.requests = sorted(requests, key=lambda r: r.arrival_s)
        self.finished: dict[str, float] = {}
        self._submitted = 0
        self.num_requests = len(requests)

    def start(self, env, submit) -> None:
        def arrivals():
            for r in self.requests:
                if r.arrival_s > env.now:
                    yield env.timeout(r.arrival_s - env.now)
                submit(r)
                self._submitted += 1

        env.process(arrivals())

    def on_finish(self, request_id, output_token_ids, now) -> None:
        self.finished[request_id] = now

    def done(self) -> bool:
        return self._submitted == len(self.requests)


class ConstantLatency:
    def __init__(self, step_s: float) -> None:
        self.step_s = step_s

    def step_time(self, new_tokens: np.ndarray, context_tokens: np.ndarray) -> float:
        return self.step_s
