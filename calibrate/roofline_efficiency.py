"""The roofline's efficiency factors (:class:`RooflineEfficiency`): the fractions of a
GPU's catalog peaks a real engine reaches, its fixed overheads and the shapes of the size
curves of :mod:`calibrate.roofline`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RooflineEfficiency:
    """Fractions of catalog peaks a real engine reaches, fixed overheads (seconds), and
    the shapes of the size curves.

    Fitted on Vidur's A100-80GB operator profile (microsoft/vidur, MIT; excerpts and
    fits in ``tests/data/vidur_a100`` and :mod:`calibrate.roofline_fit`, holdout errors
    in ``tests/test_roofline_fit.py``): ``memory`` 0.79 and ``gemm_kernel_s`` 4.65 us
    (CodeLlama-34B projections at <= 32 tokens: a ``W``-byte matrix streams at
    ``0.79 W / (W + W0)`` of HBM bandwidth, ``W0`` 9.5 MB, which is 4.65 us of the
    A100's peak bandwidth; on another GPU the same 4.65 us, ``W0`` scaled by its peak
    bandwidth: a kernel's fixed start and drain time; the decode-attention kernel's
    fit, 0.80, agrees), ``compute`` 0.755 and ``gemm_kernel_tokens`` 110 (the same
    projections at >= 1024 tokens give 0.755; 110 tokens' worth per kernel fits the
    ridge in between best: ``0.755 N / (N + 110)`` of the BF16 peak), ``attention`` 0.42 and
    ``prefill_causal_weight`` 2.33 (FlashAttention prefill: pairs on the cache at 0.42
    of the tensor-core peak, the chunk's causal triangle 2.33 times as costly per pair),
    ``attention_kernel_s`` 15 us per layer and phase (the decode kernel's fitted floor).
    All-reduces follow :mod:`calibrate.allreduce` (vLLM's custom kernel or NCCL, NCCL
    fitted on Vidur's all-reduce data): ``interconnect`` multiplies the link's fitted
    efficiency (1: as fitted), ``allreduce_latency_s`` is NCCL's 2-GPU per-call latency
    (36 us fitted), which every NCCL call's modelled latency scales with (all-reduces
    above the custom kernel's size limit, the logits all-gather, MoE dispatch and
    combine); ``custom_allreduce_scale`` multiplies vLLM's custom kernel's per-call
    latency (the GPU file's ``custom_allreduce_latency_us`` or the link's default: an
    assumption, no public measurement).
    ``step_overhead_s`` 0.4 ms and ``per_request_overhead_s`` 5 us per scheduled
    request: scheduler, input preparation and sampling (BLIS's fitted terms: 0.13 ms
    per step, 4 us per request and 32 us per layer). The first eight fields and
    ``custom_allreduce_scale`` are what ``kvsim calibrate --from-trace`` fits
    (:mod:`calibrate.roofline_terms`): multipliers on the size curves, whose shapes stay
    fixed.
    """

    compute: float = 0.755
    memory: float = 0.79
    attention: float = 0.42
    interconnect: float = 1.0
    allreduce_latency_s: float = 36e-6
    attention_kernel_s: float = 15e-6
    step_overhead_s: float = 0.4e-3
    per_request_overhead_s: float = 5e-6
    gemm_kernel_s: float = 4.65e-6
    gemm_kernel_tokens: float = 110.0
    prefill_causal_weight: float = 2.33
    custom_allreduce_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("compute", "memory", "attention", "interconnect"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"efficiency {name} must be in (0, 1], got {value!r}")
        for name in (
            "allreduce_latency_s",
            "attention_kernel_s",
            "step_overhead_s",
            "per_request_overhead_s",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 seconds")
        for name in (
            "gemm_kernel_s",
            "gemm_kernel_tokens",
            "prefill_causal_weight",
            "custom_allreduce_scale",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
