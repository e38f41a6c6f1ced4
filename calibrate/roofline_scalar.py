"""A pure-Python twin of ``RooflineLatencyModel.decode_step_times`` for one step.

Lives beside the roofline so that the formula and its scalar copy change together;
``sim.step_timing.make_decode_timer`` uses it only after checking bit-equality.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def roofline_scalar_decode_time(model: Any) -> Callable[[int, int], float] | None:
    """A pure-Python twin of the roofline's ``decode_step_times`` for one step.

    Same IEEE operations in the same order as the numpy formula, so bit-identical for
    dense (non-MoE) models without sliding windows; None for anything else.
    """
    if getattr(model, "kind", None) != "roofline":
        return None
    try:
        if model.model.num_experts or any(g.window is not None for g in model.groups):
            return None
        dense_w = model.dense_weight_bytes  # no MoE here (checked above)
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
