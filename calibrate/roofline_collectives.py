"""The step's collectives in the roofline step-time model (:mod:`calibrate.roofline`,
whose ``RooflineLatencyModel`` they are a base of): the tensor-parallel all-reduces and
logits all-gather, and an MoE model's dispatch and combine over its data-parallel group,
each as vLLM runs it on the GPU's link (:class:`calibrate.allreduce.AllReducePlan`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from calibrate.allreduce import NCCL_LATENCY_2_S, AllReducePlan
from kvcore.kv_cache_interface import get_dtype_size

if TYPE_CHECKING:
    from calibrate.gpu_spec import GPUSpec
    from calibrate.model_spec import ModelSpec
    from calibrate.roofline_efficiency import RooflineEfficiency


class RooflineCollectives:
    """The collectives' plans, bytes and seconds of one rank's step, for a roofline
    model that has ``model``, ``gpu``, its parallel sizes ``tp`` and ``dp``, its
    efficiency factors ``eff`` and ``graph_tokens`` (the step's tokens as its CUDA graph
    runs them)."""

    model: ModelSpec
    gpu: GPUSpec
    tp: int
    dp: int
    eff: RooflineEfficiency

    if TYPE_CHECKING:

        def graph_tokens(self, num_tokens: np.ndarray) -> np.ndarray: ...

    def _init_collectives(self) -> None:
        """The step's collectives: the TP all-reduces' bytes per token and plan, the
        logits all-gather's bytes per request and the MoE dispatch's plan and bytes per
        token over the DP group (None: no such group)."""
        model, gpu, tp = self.model, self.gpu, self.tp
        abytes = get_dtype_size(model.dtype)
        self.allreduce_bytes_per_token = model.hidden_size * abytes
        self.allreduce = AllReducePlan(gpu, tp) if tp > 1 else None
        # every TP rank runs the sampler, so each step all-gathers the logits of its
        # requests (vLLM's LogitsProcessor._gather_logits on CUDA): NCCL, V per request
        self.logits_bytes_per_request = model.vocab_size * abytes
        # MoE dispatch (all-gather of hidden states and router logits) and combine
        # (reduce-scatter) over the DP group, NCCL's ring (vLLM's default all2all
        # backend, allgather_reducescatter): bytes per token of each
        self.dispatch = AllReducePlan(gpu, self.dp) if self.dp > 1 else None
        self.dispatch_bytes_per_token = (2 * model.hidden_size + model.num_experts) * abytes

    def allreduce_parts(self, num_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One all-reduce call of ``num_tokens`` tokens' activations
        (:class:`calibrate.allreduce.AllReducePlan`): its NCCL latency in units of
        ``NCCL_LATENCY_2_S`` (0 where the custom kernel or symmetric memory serves it),
        its custom-kernel latency in seconds (0 where NCCL does) and its bytes' seconds
        at the link's fitted efficiency."""
        assert self.allreduce is not None
        tokens = self.graph_tokens(num_tokens)
        size = np.asarray(tokens * self.allreduce_bytes_per_token, dtype=np.float64)
        latency, per_byte = self.allreduce.parts_array(size)
        fast = size < self.allreduce.fast_max
        nccl = np.where(fast, 0.0, latency / NCCL_LATENCY_2_S)
        return nccl, np.where(fast, latency, 0.0), size * per_byte

    def dispatch_parts(self, num_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """An MoE layer's dispatch and combine over the DP group of ``dp`` ranks, each
        with ``num_tokens`` tokens: its two NCCL calls' latency in units of
        ``NCCL_LATENCY_2_S`` and its bytes' seconds at the link's fitted efficiency. An
        all-gather or reduce-scatter of ``M`` bytes in all moves ``(w - 1) / w M`` per
        rank, half a ring all-reduce's."""
        assert self.dispatch is not None
        size = self.dp * np.asarray(self.graph_tokens(num_tokens), dtype=np.float64)
        latency = np.full_like(size, 2.0 * self.dispatch.nccl_latency / NCCL_LATENCY_2_S)
        return latency, size * self.dispatch_bytes_per_token * self.dispatch.ring / 2.0

    def logits_gather_parts(self, num_requests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The step's all-gather of ``num_requests`` requests' logits over the TP group
        (one NCCL call): its latency in units of ``NCCL_LATENCY_2_S`` and its bytes'
        seconds at the link's fitted efficiency (``(tp - 1) / tp`` of them per rank)."""
        assert self.allreduce is not None
        size = np.asarray(num_requests, dtype=np.float64) * self.logits_bytes_per_request
        latency = np.full_like(size, self.allreduce.nccl_latency / NCCL_LATENCY_2_S)
        return latency, size * (self.allreduce.ring / 2.0)

    def _allreduce_time(self, num_tokens: np.ndarray, num_requests: np.ndarray) -> np.ndarray:
        """Seconds of the step's collectives: the TP all-reduces and logits all-gather,
        and the MoE layers' dispatch and combine."""
        out = np.zeros_like(num_tokens, dtype=np.float64)
        lat_s, ic = self.eff.allreduce_latency_s, self.eff.interconnect
        if self.allreduce is not None:
            nccl, custom, link = self.allreduce_parts(num_tokens)
            one = nccl * lat_s + custom * self.eff.custom_allreduce_scale + link / ic
            out = out + 2.0 * self.model.num_layers * one
            latency, link = self.logits_gather_parts(num_requests)
            out = out + (latency * lat_s + link / ic)
        if self.dispatch is not None:
            latency, link = self.dispatch_parts(num_tokens)
            out = out + self.model.num_moe_layers * (latency * lat_s + link / ic)
        return out
