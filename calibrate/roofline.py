"""Roofline step-time model: a step costs what its slowest resource needs, per phase.

For one tensor-parallel rank and one step with ``N`` tokens over ``R`` requests:

* dense layers: ``max(memory, compute)`` with ``memory = (weight_bytes + G W0) / BW``
  and ``compute = ((N + n0) * 2 * P_active + (R + n0) * 2 * V * H) / F``: all non-expert
  weights are read once per step (for MoE layers, the expected number of distinct
  experts ``N`` tokens route to, ``E * (1 - (1 - k/E)^N)`` under uniform routing), each
  of the ``G = 4 * layers + 1`` GEMM kernels (QKV, output, up, down; LM head) costs
  ``W0 = gemm_kernel_s * BW_peak`` bytes' worth more (a fixed time per kernel), and
  each GEMM ``n0`` tokens' worth more FLOPs: a matrix of ``W`` bytes streams at
  ``W / (W + W0)`` of ``BW``, ``N`` tokens reach ``N / (N + n0)`` of ``F``. The LM head
  runs on one position per request (vLLM's ``logits_indices``).
* attention, per layer kind (full / sliding window / MLA) and per phase (prefill chunks,
  decodes), ``max(pair_flops / F_attn, kv_bytes_read / BW)``. A chunk of ``q`` tokens on
  ``c`` cached ones does ``sum_{i=1..q} min(c + i, W)`` query-key pairs (causal,
  capped by the window ``W``), its causal triangle on itself (``q (q + 1) / 2`` pairs,
  window-capped) counted ``kappa`` times (partly masked tiles), and reads
  ``min(c + q, W + q - 1)`` tokens of KV (the keys some query of the chunk sees). MLA
  prefill works in the expanded head space (``qk_nope + qk_rope`` and ``v_head_dim`` per
  head), MLA decode in the absorbed latent space (``kv_lora_rank + qk_rope`` and
  ``kv_lora_rank``); its latent cache is replicated on every rank.
* tensor parallelism: work and weights are split ``tp`` ways (KV heads: at least one per
  rank), plus two all-reduces per layer of ``N * H`` activations, each as vLLM runs it
  on this GPU's link (custom one-/two-shot kernel or NCCL ring,
  :class:`calibrate.allreduce.AllReducePlan`), and one NCCL all-gather of the step's
  logits (``R * V`` values: every rank samples, vLLM's ``LogitsProcessor``): each
  call's latency scaled by ``allreduce_latency_s / 36 us`` (NCCL's fitted 2-GPU
  latency), its bytes' time divided by ``interconnect``.
* data parallelism with an MoE model (``data_parallel_size`` ``dp > 1``, with or
  without ``--enable-expert-parallel``): the routed experts are split over all
  ``dp * tp`` ranks, and each MoE layer gathers the DP group's tokens before its experts
  and reduce-scatters after them (vLLM's default all2all backend,
  ``allgather_reducescatter``), two NCCL calls over the link moving ``(dp - 1) / dp``
  of the group's hidden states (plus router logits) each; the other DP ranks are taken
  to carry this rank's load (vLLM pads every rank's batch to the group's largest and
  steps them together, which kvsim does not: each DP rank is a replica of its own).
  A dense model's DP ranks are independent engines: nothing changes;
* ``attention_kernel_s`` per layer and attention phase present (kernel floor);
* ``step_overhead_s`` per step (scheduler, input preparation, sampling, launch) and
  ``per_request_overhead_s`` per scheduled request.

The phases run one after another, so their times add. ``F`` and ``BW`` are the catalog's
peaks times the efficiency factors below. The size curves (``W0``, ``n0``, ``kappa``)
and the all-reduce costs are fitted on A100-80GB measurements (Vidur's public profiling
data, microsoft/vidur; :mod:`calibrate.roofline_fit`); on other GPUs the same curves
apply (the same seconds per GEMM kernel at peak bandwidth, tokens per GEMM, weight of the
causal triangle, all-reduce latencies and link efficiencies), scaled by that GPU's own
peaks and link. A step that fits a
captured CUDA graph runs its GEMMs and collectives on its tokens padded to the graph's
size (:mod:`calibrate.cudagraph_sizes`). Not modelled: activation traffic, kernel launch
gaps inside a step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict

import numpy as np

from calibrate.gpu_spec import GPUSpec
from calibrate.latency_interface import LatencyModel, as_decode_arrays, as_token_arrays
from calibrate.model_spec import ModelSpec
from calibrate.roofline_attention import (
    _AttentionGroup,
    _causal_pairs,
    _kv_reach,
    attention_groups,
    decode_kv_tokens,
    prefill_pairs,
)
from calibrate.roofline_collectives import RooflineCollectives
from calibrate.roofline_efficiency import RooflineEfficiency
from kvcore.kv_cache_interface import get_dtype_size


class RooflineLatencyModel(RooflineCollectives, LatencyModel):
    """Step times from the model's shapes and the GPU's peaks (see the module docstring;
    the collectives' terms are its base's, :mod:`calibrate.roofline_collectives`)."""

    kind = "roofline"

    def __init__(
        self,
        model: ModelSpec,
        gpu: GPUSpec,
        tensor_parallel_size: int = 1,
        efficiency: RooflineEfficiency | None = None,
        kv_cache_dtype: str = "auto",
        data_parallel_size: int = 1,
        efficiency_source: str | None = None,
        cudagraph_sizes: tuple[int, ...] = (),
    ) -> None:
        if tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size!r}")
        if data_parallel_size < 1:
            raise ValueError(f"data_parallel_size must be >= 1, got {data_parallel_size!r}")
        self.model, self.gpu, self.tp = model, gpu, tensor_parallel_size
        # data parallelism changes a step only for an MoE model (its experts span the
        # DP group); a dense model's DP ranks are independent engines
        self.dp = data_parallel_size if model.num_experts else 1
        self.eff = efficiency or RooflineEfficiency()
        self.efficiency_source = efficiency_source
        self.kv_cache_dtype = kv_cache_dtype
        self.cudagraph_sizes = tuple(cudagraph_sizes)
        """Token counts with a captured CUDA graph (:mod:`calibrate.cudagraph_sizes`):
        a step of at most the largest runs its GEMMs and collectives on the tokens
        padded to the next one; empty: eager, no padding."""
        self._graph_sizes = np.asarray(self.cudagraph_sizes, dtype=np.float64)
        self._init_gemm_terms()
        self._init_collectives()
        self.groups = attention_groups(model, self.tp, kv_cache_dtype)

    def _init_gemm_terms(self) -> None:
        """The GEMMs' throughputs (FLOP/s, bytes/s at the efficiency factors) and what
        the dense layers' memory and compute bounds charge: weight bytes per step (plus
        ``W0`` per GEMM kernel), one routed expert's bytes, and the FLOPs per token and
        per sampled request, all on this rank."""
        model, gpu, tp, eff = self.model, self.gpu, self.tp, self.eff
        counts = model.param_counts()
        wdtype = model.weight_dtype or model.dtype
        wbytes, abytes = get_dtype_size(wdtype), get_dtype_size(model.dtype)
        self.gemm_flops_per_s = gpu.peak_flops(wdtype) * eff.compute
        self.attn_flops_per_s = gpu.peak_flops(model.dtype) * eff.attention
        self.bytes_per_s = gpu.hbm_bandwidth_bytes_per_s * eff.memory
        lm_head_bytes = counts.embedding * abytes  # tied or not, the head reads V x H
        non_expert = counts.attention + counts.dense_mlp + counts.moe_shared
        self.gemm_kernels = 4 * model.num_layers + 1
        # what the memory bound charges: the weights plus W0 per GEMM kernel
        self.dense_weight_bytes = (
            non_expert * wbytes + (counts.router + counts.norms) * abytes + lm_head_bytes
        ) / tp + self.gemm_kernels * eff.gemm_kernel_s * gpu.hbm_bandwidth_bytes_per_s
        # one routed expert's bytes on this rank: experts span all dp * tp ranks
        self.expert_bytes = (
            3 * model.hidden_size * model.moe_intermediate_size * wbytes / (tp * self.dp)
        )
        active_routed = counts.active_per_token - (
            counts.embedding + counts.lm_head + non_expert + counts.router + counts.norms
        )
        self.flops_per_token = 2.0 * (non_expert + counts.router + active_routed) / tp
        self.lm_head_flops_per_request = 2.0 * counts.embedding / tp

    def with_efficiency(self, efficiency: RooflineEfficiency) -> RooflineLatencyModel:
        """This model (model, GPU, parallel sizes, KV dtype, CUDA graphs) at other
        factors."""
        return RooflineLatencyModel(
            self.model, self.gpu, self.tp, efficiency, self.kv_cache_dtype, self.dp,
            cudagraph_sizes=self.cudagraph_sizes,
        )  # fmt: skip

    # ---- shared terms ------------------------------------------------------------------

    def _distinct_experts(self, num_tokens: np.ndarray) -> np.ndarray:
        """Experts the MoE layers touch, counted in this rank's expert shards: the
        ``dp * num_tokens`` tokens of the DP group (its other ranks taken to carry as
        many as this one; vLLM pads every rank's batch to the group's largest)."""
        e, k = self.model.num_experts, self.model.num_experts_per_tok
        if not e:
            return np.zeros_like(num_tokens, dtype=np.float64)
        return e * (1.0 - (1.0 - k / e) ** (self.dp * num_tokens))

    def _dense_time(self, num_tokens: np.ndarray, num_requests: np.ndarray) -> np.ndarray:
        weights = self.dense_weight_bytes + (
            self.model.num_moe_layers * self._distinct_experts(num_tokens) * self.expert_bytes
        )
        flops = self.gemm_flops(num_tokens, num_requests)
        return np.maximum(weights / self.bytes_per_s, flops / self.gemm_flops_per_s)

    def graph_tokens(self, num_tokens: np.ndarray) -> np.ndarray:
        """``num_tokens`` as the step's CUDA graph runs them: padded to the next captured
        size, unchanged above the largest (or without graphs)."""
        sizes = self._graph_sizes
        if not sizes.size:
            return num_tokens
        n = np.asarray(num_tokens, dtype=np.float64)
        i = np.minimum(np.searchsorted(sizes, n, side="left"), sizes.size - 1)
        return np.where(n <= sizes[-1], sizes[i], n)

    def gemm_flops(self, num_tokens: np.ndarray, num_requests: np.ndarray) -> np.ndarray:
        """FLOPs the compute bound charges: the graph's padded tokens, each GEMM ``n0``
        tokens' worth more (the LM head runs on the sampled positions only)."""
        n0 = self.eff.gemm_kernel_tokens
        return (self.graph_tokens(num_tokens) + n0) * self.flops_per_token + (
            num_requests + n0
        ) * self.lm_head_flops_per_request

    def _overhead(self, num_requests: np.ndarray) -> np.ndarray:
        return self.eff.step_overhead_s + self.eff.per_request_overhead_s * num_requests

    def _attn_phase(
        self, g: _AttentionGroup, pairs: float, kv_tokens: float, decode: bool
    ) -> float:
        per_pair = g.decode_flops_per_pair if decode else g.prefill_flops_per_pair
        compute = pairs * per_pair / self.attn_flops_per_s
        memory = kv_tokens * g.kv_bytes_per_token / self.bytes_per_s
        return g.num_layers * (max(compute, memory) + self.eff.attention_kernel_s)

    # ---- the interface -----------------------------------------------------------------

    def step_time(self, new_tokens: np.ndarray, context_tokens: np.ndarray) -> float:
        """Seconds for one step (see the module docstring); 0.0 for an empty step."""
        new, ctx = as_token_arrays(new_tokens, context_tokens)
        active = new > 0
        new, ctx = new[active].astype(np.float64), ctx[active].astype(np.float64)
        if not new.size:
            return 0.0
        n_tok, n_req = np.float64(new.sum()), np.float64(new.size)
        total = float(self._dense_time(n_tok, n_req) + self._allreduce_time(n_tok, n_req))
        total += float(self._overhead(n_req))
        is_decode = new == 1
        for g in self.groups:
            for decode in (False, True):
                sel = is_decode if decode else ~is_decode
                if not sel.any():
                    continue
                q, c = new[sel], ctx[sel]
                if decode:
                    pairs = float(_causal_pairs(q, c, g.window).sum())
                else:
                    pairs = prefill_pairs(q, c, g.window, self.eff.prefill_causal_weight)
                reach = _kv_reach(q, c, g.window)
                total += self._attn_phase(g, pairs, float(reach.sum()), decode)
        return total

    def decode_step_times(
        self,
        batch_sizes: np.ndarray,
        total_context: np.ndarray,
        windowed_context: Mapping[int, np.ndarray] | None = None,
    ) -> np.ndarray:
        """Seconds of each decode-only step (see ``LatencyModel.decode_step_times``).

        For a decode, pairs and KV tokens read are both ``context + 1`` (``min(c + 1, W)``
        for sliding windows).
        """
        b, k = as_decode_arrays(batch_sizes, total_context)
        out = self._dense_time(b, b) + self._allreduce_time(b, b) + self._overhead(b)
        for g in self.groups:
            tokens = decode_kv_tokens(g, b, k, windowed_context)
            compute = tokens * g.decode_flops_per_pair / self.attn_flops_per_s
            memory = tokens * g.kv_bytes_per_token / self.bytes_per_s
            kernel = np.where(b > 0, self.eff.attention_kernel_s, 0.0)
            out = out + g.num_layers * (np.maximum(compute, memory) + kernel)
        return np.where(b > 0, out, 0.0)

    def describe(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "model": self.model.name,
            "gpu": self.gpu.name,
            "tensor_parallel_size": self.tp,
            **({"data_parallel_size": self.dp} if self.dp > 1 else {}),
            **asdict(self.eff),
            **({"efficiency_source": self.efficiency_source} if self.efficiency_source else {}),
            "cudagraph_max_tokens": self.cudagraph_sizes[-1] if self.cudagraph_sizes else 0,
        }
