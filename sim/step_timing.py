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
from heapq import heappush
from typing import Any

import numpy as np
import simpy


def _roofline_decode_time(model: Any) -> Callable[[int, int], float] | None:
    """A pure-Python twin of the roofline's ``decode_step_times`` for one step.

    Same IEEE operations in the same order as the numpy formula, so bit-identical for
    dense (non-MoE) models without sliding windows; None for anything else.
    """
    if getattr(model, "kind", None) != "roofline":
        return None
    try:
        if model.model.num_experts or any(g.window is not None for g in model.groups):
            return None
        dense_w = model.dense_weight_bytes + (model.model.num_moe_layers * 0.0 * model.expert_bytes)
        bps = model.bytes_per_s
        gfs = model.gemm_flops_per_s
        fpt = model.flops_per_token
        lm = model.lm_head_flops_per_request
        tp = model.tp
        eff = model.eff
        if tp == 1:
            ar_coef = None
        else:
            link = model.gpu.interconnect_bytes_per_s * eff.interconnect
            ar_coef = (2.0 * (tp - 1) / tp, model.allreduce_bytes_per_token, link)
        ar_lat = eff.allreduce_latency_s
        two_layers = 2.0 * model.model.num_layers
        step_oh = eff.step_overhead_s
        req_oh = eff.per_request_overhead_s
        afs = model.attn_flops_per_s
        kernel = eff.attention_kernel_s
        groups = [
            (g.num_layers, g.decode_flops_per_pair, g.kv_bytes_per_token) for g in model.groups
        ]
    except AttributeError:
        return None

    def decode_time(batch: int, context: int) -> float:
        if batch <= 0:
            return 0.0
        b = float(batch)
        k = float(context)
        weights = dense_w / bps
        flops = (b * fpt + b * lm) / gfs
        out = weights if weights >= flops else flops
        if ar_coef is None:
            out = out + 0.0
        else:
            c, per_tok, link = ar_coef
            out = out + two_layers * (ar_lat + c * (b * per_tok) / link)
        out = out + (step_oh + req_oh * b)
        tokens = k + b
        for layers, per_pair, kv_bytes in groups:
            compute = tokens * per_pair / afs
            memory = tokens * kv_bytes / bps
            out = out + layers * ((compute if compute >= memory else memory) + kernel)
        return out

    return decode_time


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
        fn = _roofline_decode_time(latency_model)
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


def timeout_at(env: simpy.Environment, when: float) -> simpy.Event:
    """An event that fires at absolute time ``when`` (>= now), scheduled as a Timeout.

    ``env.timeout(d)`` lands at ``env.now + d``; a stretch of steps ends where the
    sequential sums land, which this places exactly, in one event.
    """
    event = simpy.Event(env)
    event._ok = True
    event._value = None
    heappush(env._queue, (when, simpy.events.NORMAL, next(env._eid), event))
    return event
