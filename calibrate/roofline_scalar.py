"""A pure-Python twin of ``RooflineLatencyModel.decode_step_times`` for one step.

Lives beside the roofline so that the formula and its scalar copy change together;
``sim.step_timing.make_decode_timer`` uses it only after checking bit-equality.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class _ScalarDecode:
    """The roofline's decode-step constants, and its formula in Python floats."""

    def __init__(self, model: Any) -> None:
        self.dense_w = model.dense_weight_bytes  # no MoE here (checked by the caller)
        self.bps = model.bytes_per_s
        self.gfs = model.gemm_flops_per_s
        self.fpt = model.flops_per_token
        self.lm = model.lm_head_flops_per_request
        tp, eff = model.tp, model.eff
        if tp == 1:
            self.ar_coef = None
        else:
            link = model.gpu.interconnect_bytes_per_s * eff.interconnect
            self.ar_coef = (2.0 * (tp - 1) / tp, model.allreduce_bytes_per_token, link)
        self.ar_lat = eff.allreduce_latency_s
        self.two_layers = 2.0 * model.model.num_layers
        self.step_oh = eff.step_overhead_s
        self.req_oh = eff.per_request_overhead_s
        self.afs = model.attn_flops_per_s
        self.kernel = eff.attention_kernel_s
        self.groups = [
            (g.num_layers, g.decode_flops_per_pair, g.kv_bytes_per_token) for g in model.groups
        ]

    def base_time(self, b: float) -> float:
        """The step's terms that depend on the batch size only."""
        weights = self.dense_w / self.bps
        flops = (b * self.fpt + b * self.lm) / self.gfs
        out = weights if weights >= flops else flops
        if self.ar_coef is None:
            out = out + 0.0
        else:
            c, per_tok, link = self.ar_coef
            out = out + self.two_layers * (self.ar_lat + c * (b * per_tok) / link)
        return out + (self.step_oh + self.req_oh * b)

    def decode_time(self, batch: int, context: int) -> float:
        if batch <= 0:
            return 0.0
        b = float(batch)
        out = self.base_time(b)
        tokens = float(context) + b
        afs, bps, kernel = self.afs, self.bps, self.kernel
        for layers, per_pair, kv_bytes in self.groups:
            compute = tokens * per_pair / afs
            memory = tokens * kv_bytes / bps
            out = out + layers * ((compute if compute >= memory else memory) + kernel)
        return out

    def stretch_times(
        self, start: float, until: float, batch: int, context0: int, max_steps: int
    ) -> tuple[list[float], list[float], float]:
        """Steps of ``batch`` decodes from ``context0`` tokens (growing by ``batch``),
        started one after another from ``start`` while they start before ``until``
        (at most ``max_steps``): ``(starts, durations, end)``, each duration equal to
        ``decode_time(batch, context)`` bit for bit."""
        starts: list[float] = []
        durations: list[float] = []
        t = start
        if batch <= 0:
            return starts, durations, t
        b = float(batch)
        base = self.base_time(b)
        afs, bps, kernel, groups = self.afs, self.bps, self.kernel, self.groups
        ctx = context0
        for _ in range(max_steps):
            if t >= until:
                break
            tokens = float(ctx) + b
            out = base
            for layers, per_pair, kv_bytes in groups:
                compute = tokens * per_pair / afs
                memory = tokens * kv_bytes / bps
                out = out + layers * ((compute if compute >= memory else memory) + kernel)
            starts.append(t)
            durations.append(out)
            t = t + out
            ctx += batch
        return starts, durations, t


def _scalar_decode(model: Any) -> _ScalarDecode | None:
    if getattr(model, "kind", None) != "roofline":
        return None
    try:
        if model.model.num_experts or any(g.window is not None for g in model.groups):
            return None
        return _ScalarDecode(model)
    except AttributeError:
        return None


def roofline_scalar_decode_time(model: Any) -> Callable[[int, int], float] | None:
    """A pure-Python twin of the roofline's ``decode_step_times`` for one step.

    Same IEEE operations in the same order as the numpy formula, so bit-identical for
    dense (non-MoE) models without sliding windows; None for anything else.
    """
    twin = _scalar_decode(model)
    return None if twin is None else twin.decode_time


def roofline_scalar_stretch_times(
    model: Any,
) -> Callable[[float, float, int, int, int], tuple[list[float], list[float], float]] | None:
    """``_ScalarDecode.stretch_times`` for the roofline ``model`` (None where
    :func:`roofline_scalar_decode_time` is None)."""
    twin = _scalar_decode(model)
    return None if twin is None else twin.stretch_times


def roofline_scalar_step_time(model: Any) -> Callable[[list[int], list[int]], float] | None:
    """A pure-Python twin of the roofline's ``step_time`` for small batches.

    ``f(new_tokens, context_tokens)`` (lists, one entry per scheduled request) computes
    the same formula as ``RooflineLatencyModel.step_time`` with Python floats, summing
    in request order; numpy sums pairwise, so the two may differ in the last bits (the
    caller checks agreement). None for MoE models and sliding windows.
    """
    if getattr(model, "kind", None) != "roofline":
        return None
    try:
        if model.model.num_experts or any(g.window is not None for g in model.groups):
            return None
        weights_s = model.dense_weight_bytes / model.bytes_per_s
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
            (
                g.num_layers,
                g.prefill_flops_per_pair,
                g.decode_flops_per_pair,
                g.kv_bytes_per_token,
            )
            for g in model.groups
        ]
    except AttributeError:
        return None

    def step_time(new_tokens: list[int], context_tokens: list[int]) -> float:
        n_tok = 0
        n_req = 0
        p_pairs = p_reach = d_pairs = d_reach = 0.0
        n_prefill = n_decode = 0
        for q, c in zip(new_tokens, context_tokens):
            if q <= 0:
                continue
            n_tok += q
            n_req += 1
            end = c + q
            if q == 1:
                n_decode += 1
                d_pairs += c + 1.0
                d_reach += end
            else:
                n_prefill += 1
                p_pairs += q * ((c + 1.0) + end) / 2.0
                p_reach += end
        if not n_req:
            return 0.0
        t, r = float(n_tok), float(n_req)
        flops_s = (t * fpt + r * lm) / gfs
        total = weights_s if weights_s >= flops_s else flops_s
        if ar_coef is not None:
            c, per_tok, link = ar_coef
            total += two_layers * (ar_lat + c * (t * per_tok) / link)
        total += step_oh + req_oh * r
        for layers, prefill_pp, decode_pp, kv_bytes in groups:
            if n_prefill:
                compute = p_pairs * prefill_pp / afs
                memory = p_reach * kv_bytes / bps
                total += layers * ((compute if compute >= memory else memory) + kernel)
            if n_decode:
                compute = d_pairs * decode_pp / afs
                memory = d_reach * kv_bytes / bps
                total += layers * ((compute if compute >= memory else memory) + kernel)
        return total

    return step_time
