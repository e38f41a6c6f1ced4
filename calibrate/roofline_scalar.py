"""Pure-Python twins of ``RooflineLatencyModel``'s step formulas, for the engine loop.

``decode_time`` / ``stretch_times`` repeat ``decode_step_times``' IEEE operations in
the same order (bit-identical: fast-forward relies on it, and
``sim.engine.step_timing.make_decode_timer`` checks it); ``step_time`` follows ``step_time``
summing in request order (checked to 1e-12 by ``make_step_timer``). They live beside
the roofline so that formula and twins change together.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from calibrate.allreduce import NCCL_LATENCY_2_S


class ScalarRoofline:
    """The roofline's constants, and its step formulas in Python floats."""

    def __init__(self, model: Any) -> None:
        # Every constant as a float: int operands are converted exactly (all are below
        # 2**53), so the arithmetic is the model's, and compiled builds use C doubles.
        self.dense_w = float(model.dense_weight_bytes)  # no MoE here (checked by the caller)
        self.bps = float(model.bytes_per_s)
        self.gfs = float(model.gemm_flops_per_s)
        self.fpt = float(model.flops_per_token)
        self.lm = float(model.lm_head_flops_per_request)
        eff = model.eff
        self.n0 = float(eff.gemm_kernel_tokens)
        self.graphs: list[float] = [float(x) for x in model.cudagraph_sizes]
        self.kappa1 = float(eff.prefill_causal_weight) - 1.0
        plan = model.allreduce  # an AllReducePlan, or None at TP 1
        self.has_ar = plan is not None
        # AllReducePlan.parts' constants: fast (custom / symmetric memory) max,
        # one-shot max, custom latency, one-shot and ring seconds per byte, NCCL latency
        self.ar: tuple[float, float, float, float, float, float] = (
            (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            if plan is None
            else (
                float(plan.fast_max), float(plan.one_shot_max), float(plan.custom_latency),
                float(plan.one_shot), float(plan.ring), float(plan.nccl_latency),
            )
        )  # fmt: skip
        self.ar_per_tok = float(model.allreduce_bytes_per_token)
        # the logits all-gather (one NCCL call): latency units, seconds per request
        self.lg_lat = 0.0 if plan is None else float(plan.nccl_latency) / NCCL_LATENCY_2_S
        self.lg_bpr = float(model.logits_bytes_per_request)
        self.lg_half_ring = 0.0 if plan is None else float(plan.ring) / 2.0
        self.ar_ic = float(eff.interconnect)
        self.ar_lat = float(eff.allreduce_latency_s)
        self.custom_scale = float(eff.custom_allreduce_scale)
        self.ar_ref = NCCL_LATENCY_2_S
        self.two_layers = 2.0 * model.model.num_layers
        self.step_oh = float(eff.step_overhead_s)
        self.req_oh = float(eff.per_request_overhead_s)
        self.afs = float(model.attn_flops_per_s)
        self.kernel = float(eff.attention_kernel_s)
        self.groups: list[tuple[float, float, float]] = [
            (float(g.num_layers), float(g.decode_flops_per_pair), float(g.kv_bytes_per_token))
            for g in model.groups
        ]
        self.prefill_groups: list[tuple[float, float, float]] = [
            (float(g.num_layers), float(g.prefill_flops_per_pair), float(g.kv_bytes_per_token))
            for g in model.groups
        ]

    def base_time(self, t: float, r: float) -> float:
        """The step's terms that do not depend on context: weights or GEMM flops,
        all-reduce and overheads, for ``t`` tokens of ``r`` requests."""
        weights = self.dense_w / self.bps
        graphs = self.graphs  # RooflineLatencyModel.graph_tokens
        g = t if not graphs or t > graphs[-1] else graphs[bisect_left(graphs, t)]
        flops = ((g + self.n0) * self.fpt + (r + self.n0) * self.lm) / self.gfs
        out = weights if weights >= flops else flops
        if self.has_ar:  # RooflineLatencyModel._allreduce_time, AllReducePlan.parts inlined
            fast_max, one_shot_max, custom_lat, one_shot, ring, nccl_lat = self.ar
            size = g * self.ar_per_tok
            if size < fast_max:  # the custom kernel (or symmetric memory): its latency
                latency = custom_lat * self.custom_scale
            else:  # NCCL: its latency in units of the fitted 2-GPU one
                latency = nccl_lat / self.ar_ref * self.ar_lat
            per_byte = one_shot if size < one_shot_max else ring
            one = latency + size * per_byte / self.ar_ic
            collectives = self.two_layers * one
            gather = self.lg_lat * self.ar_lat + (r * self.lg_bpr) * self.lg_half_ring / self.ar_ic
            out = out + (collectives + gather)
        return out + (self.step_oh + self.req_oh * r)

    def _attention(
        self, groups: list[tuple[float, float, float]], pairs: float, kv: float, out: float = 0.0
    ) -> float:
        """``out`` plus the seconds of one attention phase over all layers (compute- or
        memory-bound), added layer group by layer group."""
        for layers, per_pair, kv_bytes in groups:
            compute = pairs * per_pair / self.afs
            memory = kv * kv_bytes / self.bps
            out = out + layers * ((compute if compute >= memory else memory) + self.kernel)
        return out

    def step_time(self, new_tokens: list[int], context_tokens: list[int]) -> float:
        """``step_time`` for per-request lists, summing in request order (numpy sums
        pairwise, so the two may differ in the last bits)."""
        n_tok = n_req = n_prefill = n_decode = 0
        p_pairs = p_tri = p_reach = d_pairs = d_reach = 0.0
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
                p_tri += q * (1.0 + q) / 2.0
                p_reach += end
        if not n_req:
            return 0.0
        total = self.base_time(float(n_tok), float(n_req))
        if n_prefill:
            pairs = p_pairs + self.kappa1 * p_tri  # the chunks' triangles weigh kappa
            total += self._attention(self.prefill_groups, pairs, p_reach)
        if n_decode:
            total += self._attention(self.groups, d_pairs, d_reach)
        return total

    def decode_time(self, batch: int, context: int) -> float:
        if batch <= 0:
            return 0.0
        b = float(batch)
        tokens = float(context) + b
        return self._attention(self.groups, tokens, tokens, self.base_time(b, b))

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
        base = self.base_time(b, b)
        attention, groups = self._attention, self.groups
        ctx = context0
        if len(groups) == 1:  # _attention inlined for one layer group (same operations)
            (layers, per_pair, kv_bytes), afs, bps, kernel = (
                groups[0],
                self.afs,
                self.bps,
                self.kernel,
            )
            for _ in range(max_steps):
                if t >= until:
                    break
                tokens = float(ctx) + b
                compute = tokens * per_pair / afs
                memory = tokens * kv_bytes / bps
                out = base + layers * ((compute if compute >= memory else memory) + kernel)
                starts.append(t)
                durations.append(out)
                t = t + out
                ctx += batch
            return starts, durations, t
        for _ in range(max_steps):
            if t >= until:
                break
            tokens = float(ctx) + b
            out = attention(groups, tokens, tokens, base)
            starts.append(t)
            durations.append(out)
            t = t + out
            ctx += batch
        return starts, durations, t


def scalar_roofline(model: Any) -> ScalarRoofline | None:
    """The pure-Python twin of a roofline ``model``; None for other models, MoE models
    and sliding windows (where no twin is exact)."""
    if getattr(model, "kind", None) != "roofline":
        return None
    try:
        if model.model.num_experts or any(g.window is not None for g in model.groups):
            return None
        return ScalarRoofline(model)
    except AttributeError:
        return None
