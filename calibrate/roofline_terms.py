"""The roofline's step time as a sum of terms, each linear in one efficiency parameter.

For fixed branches of its ``max`` operations (which of memory or compute bounds each
dense and attention phase), ``RooflineLatencyModel.step_time`` is a dot product
``terms(step) . theta`` with

``theta = (1/memory, 1/compute, 1/attention, 1/interconnect, allreduce_latency_s,
attention_kernel_s, step_overhead_s, per_request_overhead_s, custom_allreduce_scale)``

(the efficiency factors of :class:`calibrate.roofline.RooflineEfficiency`) and terms at
the catalog's nominal peaks, with the model's size curves (GEMM kernel bytes and tokens,
the prefill triangle's weight) and its all-reduce model in them: seconds for the first
four (``link_s``: the modelled all-reduce bytes' time, which ``interconnect`` divides),
counts for the rest (NCCL calls, each weighted by its latency over NCCL's 2-GPU one;
attention kernels; steps; scheduled requests) and seconds again for the last (the custom
all-reduce kernel's per-call latency, summed over its calls).
The efficiencies are thus multipliers on fixed curves, not the curves' shapes. The
branches are those the model takes at its own efficiency. This is what fitting the
efficiencies to measured request times solves linearly (:mod:`calibrate.trace_fit`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from calibrate.roofline import (
    RooflineEfficiency,
    RooflineLatencyModel,
    _causal_pairs,
    _kv_reach,
    decode_kv_tokens,
    prefill_pairs,
)

TERMS = (
    "memory_s",
    "compute_s",
    "attention_s",
    "link_s",
    "allreduce_calls",
    "attention_kernels",
    "steps",
    "requests",
    "custom_allreduce_s",
)
"""The term names, in ``theta`` order."""

PARAMETERS = (
    "memory",
    "compute",
    "attention",
    "interconnect",
    "allreduce_latency_s",
    "attention_kernel_s",
    "step_overhead_s",
    "per_request_overhead_s",
    "custom_allreduce_scale",
)
"""The ``RooflineEfficiency`` field each term's coefficient comes from."""

_INVERSE = 4  # the first four coefficients are 1 / efficiency


def theta_of(eff: RooflineEfficiency) -> np.ndarray:
    """The coefficient vector of ``eff`` (see the module docstring)."""
    values = [getattr(eff, name) for name in PARAMETERS]
    return np.array([1.0 / v for v in values[:_INVERSE]] + values[_INVERSE:], dtype=np.float64)


def theta_lower() -> np.ndarray:
    """The least each coefficient may be: 1 for the inverse efficiencies (an
    efficiency is at most 1), 0 for the times."""
    return np.array([1.0] * _INVERSE + [0.0] * (len(PARAMETERS) - _INVERSE))


def efficiency_of(theta: np.ndarray) -> RooflineEfficiency:
    """The ``RooflineEfficiency`` whose coefficient vector is ``theta``."""
    t = [float(x) for x in theta]
    # a coefficient at its bound 1 may come back a rounding error below it
    values = [min(1.0 / x, 1.0) for x in t[:_INVERSE]] + t[_INVERSE:]
    return RooflineEfficiency(**dict(zip(PARAMETERS, values)))


class RooflineTerms:
    """Terms of ``model``'s steps (its efficiency chooses the branches)."""

    def __init__(self, model: RooflineLatencyModel) -> None:
        self.rf = model
        eff = model.eff
        self.peak_bw = model.bytes_per_s / eff.memory
        self.peak_gemm = model.gemm_flops_per_s / eff.compute
        self.peak_attn = model.attn_flops_per_s / eff.attention

    def _base(self, out: np.ndarray, n_tok: np.ndarray, n_req: np.ndarray) -> None:
        """Dense layers, all-reduce and overheads into ``out`` (rows: steps)."""
        rf = self.rf
        weights = rf.dense_weight_bytes + (
            rf.model.num_moe_layers * rf._distinct_experts(n_tok) * rf.expert_bytes
        )
        flops = rf.gemm_flops(n_tok, n_req)
        memory_bound = weights / rf.bytes_per_s >= flops / rf.gemm_flops_per_s
        on = (n_req > 0).astype(np.float64)
        out[:, 0] += np.where(memory_bound, weights / self.peak_bw, 0.0) * on
        out[:, 1] += np.where(memory_bound, 0.0, flops / self.peak_gemm) * on
        if rf.tp > 1:
            calls = 2.0 * rf.model.num_layers
            nccl, custom, link = rf.allreduce_parts(n_tok)
            out[:, 3] += calls * link * on
            out[:, 4] += calls * nccl * on
            out[:, 8] += calls * custom * on
            latency, link = rf.logits_gather_parts(n_req)
            out[:, 3] += link * on
            out[:, 4] += latency * on
        if rf.dispatch is not None:  # the MoE layers' dispatch and combine
            calls = float(rf.model.num_moe_layers)
            latency, link = rf.dispatch_parts(n_tok)
            out[:, 3] += calls * link * on
            out[:, 4] += calls * latency * on
        out[:, 6] += on
        out[:, 7] += n_req

    def step(self, new_tokens: np.ndarray, context_tokens: np.ndarray) -> np.ndarray:
        """The terms of one step (``LatencyModel.step_time``'s arguments)."""
        rf = self.rf
        new = np.asarray(new_tokens, dtype=np.float64).reshape(-1)
        ctx = np.asarray(context_tokens, dtype=np.float64).reshape(-1)
        keep = new > 0
        new, ctx = new[keep], ctx[keep]
        out = np.zeros((1, len(TERMS)))
        if not new.size:
            return out[0]
        self._base(out, np.array([new.sum()]), np.array([float(new.size)]))
        is_decode = new == 1
        for g in rf.groups:
            for decode in (False, True):
                sel = is_decode if decode else ~is_decode
                if not sel.any():
                    continue
                q, c = new[sel], ctx[sel]
                if decode:
                    pairs = float(_causal_pairs(q, c, g.window).sum())
                else:
                    pairs = prefill_pairs(q, c, g.window, rf.eff.prefill_causal_weight)
                per_pair = g.decode_flops_per_pair if decode else g.prefill_flops_per_pair
                flops = g.num_layers * pairs * per_pair
                kv = g.num_layers * float(_kv_reach(q, c, g.window).sum()) * g.kv_bytes_per_token
                if flops / rf.attn_flops_per_s > kv / rf.bytes_per_s:
                    out[0, 2] += flops / self.peak_attn
                else:
                    out[0, 0] += kv / self.peak_bw
                out[0, 5] += g.num_layers
        return out[0]

    def decode(
        self,
        batch_sizes: np.ndarray,
        total_context: np.ndarray,
        windowed_context: Mapping[int, np.ndarray] | None = None,
    ) -> np.ndarray:
        """``[steps, len(TERMS)]`` for decode-only steps (``decode_step_times``'
        arguments)."""
        rf = self.rf
        b = np.asarray(batch_sizes, dtype=np.float64).reshape(-1)
        k = np.asarray(total_context, dtype=np.float64).reshape(-1)
        out = np.zeros((b.size, len(TERMS)))
        self._base(out, b, b)
        on = (b > 0).astype(np.float64)
        for g in rf.groups:
            tokens = decode_kv_tokens(g, b, k, windowed_context)
            flops = g.num_layers * tokens * g.decode_flops_per_pair
            kv = g.num_layers * tokens * g.kv_bytes_per_token
            compute_bound = flops / rf.attn_flops_per_s > kv / rf.bytes_per_s
            out[:, 2] += np.where(compute_bound, flops / self.peak_attn, 0.0) * on
            out[:, 0] += np.where(compute_bound, 0.0, kv / self.peak_bw) * on
            out[:, 5] += g.num_layers * on
        return out
