"""Step-timing helpers of the engine loop: exact scalar decode-step times and
absolute-time SimPy events.

``make_decode_timer`` returns a pure-Python function equal, bit for bit, to the latency
model's vectorized ``decode_step_times`` for one step (checked on sample inputs when it
is built; ``None`` when no such shortcut exists). ``timeout_at`` lets a fast-forwarded
stretch end exactly where step-by-step additions of the step times would.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import simpy

from calibrate.roofline_scalar import ScalarRoofline, scalar_roofline
from sim.engine.simpy_internals import schedule_at


def make_decode_timer(latency_model: Any) -> Callable[[int, int], float] | None:
    """``f(batch, total_context)``: one decode-only step's seconds, without numpy.

    Only returned when it equals ``latency_model.decode_step_times`` bit for bit on a
    spread of checked inputs (constant and dense roofline models); else None.
    """
    fn: Callable[[int, int], float] | None
    if getattr(latency_model, "kind", None) == "constant":
        step_s = float(latency_model.step_s)

        def fn(batch: int, context: int) -> float:
            return step_s if batch > 0 else 0.0
    else:
        twin = scalar_roofline(latency_model)
        fn = None if twin is None else twin.decode_time
    if fn is None:
        return None
    rng = random.Random(0)
    pairs = [(b, c) for b in (0, 1, 2, 3, 7, 64, 255, 1024) for c in (0, 1, 100, 4096)]
    pairs += [(rng.randint(1, 1024), rng.randint(0, 2_000_000)) for _ in range(256)]
    ref = latency_model.decode_step_times(
        np.array([b for b, _ in pairs], dtype=np.int64),
        np.array([c for _, c in pairs], dtype=np.int64),
    ).tolist()
    if any(fn(b, c) != r for (b, c), r in zip(pairs, ref)):
        return None
    return fn


StretchTimer = Callable[[float, float, int, int, int], tuple[list[float], list[float], float]]


def make_stretch_timer(
    latency_model: Any, decode_time: Callable[[int, int], float] | None
) -> StretchTimer:
    """``f(start, until, batch, context0, max_steps) -> (starts, durations, end)``: the
    steps of a decode stretch that start before ``until``, each duration the time of a
    ``batch``-request decode step over ``context0 + j * batch`` tokens and each start
    the running sum, as stepping one by one would give (one call per stretch).

    Durations are ``decode_time``'s (a :func:`make_decode_timer` result), or, without
    one, ``latency_model.decode_step_times``' for the whole stretch at once."""
    twin = getattr(decode_time, "__self__", None)
    if isinstance(twin, ScalarRoofline):
        return twin.stretch_times  # decode_time's own formula, summed step by step

    def stretch(
        start: float, until: float, batch: int, context0: int, max_steps: int
    ) -> tuple[list[float], list[float], float]:
        starts: list[float] = []
        durations: list[float] = []
        t = start
        if decode_time is None:  # vectorized over the whole stretch
            contexts = context0 + batch * np.arange(max_steps, dtype=np.int64)
            batches = np.full(max_steps, batch, dtype=np.int64)
            for d in latency_model.decode_step_times(batches, contexts).tolist():
                if t >= until:
                    break
                starts.append(t)
                durations.append(d)
                t = t + d
            return starts, durations, t
        for j in range(max_steps):  # only the steps that start before until
            if t >= until:
                break
            d = decode_time(batch, context0 + j * batch)
            starts.append(t)
            durations.append(d)
            t = t + d
        return starts, durations, t

    return stretch


CHECKED_BATCHES = 50
"""Random batches :func:`make_step_timer` checks against the latency model (each run
builds one timer per replica: the model's numpy path takes ~0.06 ms a batch, so 50 cost
about 3 ms of the run's start, 200 cost 13)."""


def make_step_timer(latency_model: Any) -> Callable[[list[int], list[int]], float] | None:
    """``f(new_tokens, context_tokens)``: one step's seconds from per-request lists,
    without numpy (constant and dense roofline models); else None.

    Agrees with ``latency_model.step_time`` to a relative 1e-12 on a spread of checked
    batches (numpy sums pairwise, this in request order). The engine times every step
    that is not decode-only with it (decode-only steps: :func:`make_decode_timer`).
    """
    fn: Callable[[list[int], list[int]], float] | None
    if getattr(latency_model, "kind", None) == "constant":
        step_s = float(latency_model.step_s)

        def fn(new_tokens: list[int], context_tokens: list[int]) -> float:
            return step_s if sum(new_tokens) > 0 else 0.0
    else:
        twin = scalar_roofline(latency_model)
        fn = None if twin is None else twin.step_time
    if fn is None:
        return None
    rng = random.Random(1)
    for _ in range(CHECKED_BATCHES):
        n = rng.randint(1, 40)
        new = [rng.choice((0, 1, 1, 1, rng.randint(1, 4096))) for _ in range(n)]
        ctx = [rng.randint(0, 100_000) for _ in range(n)]
        ref = float(
            latency_model.step_time(np.array(new, dtype=np.int64), np.array(ctx, dtype=np.int64))
        )
        if abs(fn(new, ctx) - ref) > 1e-12 * abs(ref):
            return None
    return fn


def timeout_at(env: simpy.Environment, when: float) -> simpy.Event:
    """An event that fires at absolute time ``when`` (>= now), scheduled as a Timeout.

    ``env.timeout(d)`` lands at ``env.now + d``; a stretch of steps ends where the
    sequential sums land, which this places exactly, in one event.
    """
    return schedule_at(env, when)
