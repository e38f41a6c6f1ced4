"""The non-KV memory of one rank in the KV block budget (``calibrate.budget``), term by
term as vLLM's start-up profile accounts it: weights, the profiling run's activation
peak, non-torch memory and CUDA graphs (bytes per tensor-parallel rank).

Each term is the estimate of ``calibrate.budget_terms``, or what a calibration's memory
profile measured (:class:`MeasuredMemoryTerms`) when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass

from calibrate.budget_terms import (
    activation_peak_bytes,
    cudagraph_estimate_bytes,
    default_non_torch_bytes,
    rope_cache_bytes,
)
from calibrate.model_spec import ModelSpec


@dataclass(frozen=True)
class MeasuredMemoryTerms:
    """Terms a calibration's memory profile measured (bytes per rank), replacing the
    estimates: ``non_torch_bytes`` is vLLM's ``total_consumed`` minus the weights; the
    activation peak was measured at ``max_num_batched_tokens`` / ``max_num_seqs`` and is
    rescaled by the analytic estimate's ratio for other batch limits."""

    total_memory_bytes: int
    weights_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    max_num_batched_tokens: int
    max_num_seqs: int

    @classmethod
    def from_profile(cls, terms: dict[str, object]) -> MeasuredMemoryTerms:
        """From ``ProfileResult.to_dict()`` (a calibration file's ``kv_budget``)."""
        t = {k: int(v) for k, v in terms.items() if isinstance(v, (int, float))}
        return cls(
            total_memory_bytes=t["total_memory_bytes"],
            weights_bytes=t["weights_bytes"],
            activation_peak_bytes=t["transient_peak_headroom_bytes"],
            non_torch_bytes=t["total_consumed_bytes"] - t["weights_bytes"],
            cudagraph_bytes=t["cudagraph_bytes"],
            max_num_batched_tokens=t["max_num_batched_tokens"],
            max_num_seqs=t["max_num_seqs"],
        )


@dataclass(frozen=True)
class MemoryTerms:
    """One rank's non-KV memory (bytes): ``weights`` holds the draft model's
    ``draft_weights`` too."""

    weights: int
    activation: int
    non_torch: int
    cudagraphs: int
    draft_weights: int


def weights_bytes(model: ModelSpec, tp: int, dp: int, measured: MeasuredMemoryTerms | None) -> int:
    """The target model's weights on one rank (bytes): its share of the weights
    (:meth:`ModelSpec.weight_bytes_per_rank`) plus the rotary cache, or the measured
    weights."""
    estimate = model.weight_bytes_per_rank(tp, dp) + rope_cache_bytes(model)
    return estimate if measured is None else measured.weights_bytes


def draft_weights_bytes(draft_model: ModelSpec | None, tp: int) -> int:
    """The draft model's weights on one rank (bytes; split ``tp`` ways, its rotary
    cache whole); 0 without one."""
    if draft_model is None:
        return 0
    return draft_model.weight_bytes() // tp + rope_cache_bytes(draft_model)


def activation_bytes(
    model: ModelSpec, tp: int, mbt: int, seqs: int, measured: MeasuredMemoryTerms | None
) -> int:
    """The profiling run's activation peak on one rank (bytes) at ``mbt`` batched
    tokens and ``seqs`` sequences: the estimate, or the measured peak rescaled by the
    estimate's ratio between these limits and the measured ones."""
    activation = activation_peak_bytes(model, tp, mbt, seqs)
    if measured is None:
        return activation
    at = activation_peak_bytes(model, tp, measured.max_num_batched_tokens, measured.max_num_seqs)
    return round(measured.activation_peak_bytes * activation / at)


def non_torch_bytes(tp: int, given: int | None, measured: MeasuredMemoryTerms | None) -> int:
    """Non-torch memory growth on one rank (bytes): the measured one, else ``given``,
    else the default at tensor-parallel size ``tp``."""
    if measured is not None:
        return measured.non_torch_bytes
    return default_non_torch_bytes(tp) if given is None else given


def cudagraph_bytes(
    model: ModelSpec, tp: int, given: int | None, measured: MeasuredMemoryTerms | None
) -> int:
    """CUDA-graph memory on one rank (bytes): ``given``, else the measured one, else
    the estimate."""
    if given is not None:
        return given
    if measured is not None:
        return measured.cudagraph_bytes
    return cudagraph_estimate_bytes(model, tp)


def memory_terms(
    model: ModelSpec,
    tp: int,
    dp: int,
    mbt: int,
    seqs: int,
    *,
    cudagraph_memory_bytes: int | None,
    non_torch_memory_bytes: int | None,
    measured: MeasuredMemoryTerms | None,
    draft_model: ModelSpec | None,
) -> MemoryTerms:
    """Every non-KV term of one rank (bytes), each from :func:`weights_bytes`,
    :func:`activation_bytes`, :func:`non_torch_bytes`, :func:`cudagraph_bytes` and
    :func:`draft_weights_bytes`."""
    weights = weights_bytes(model, tp, dp, measured)
    activation = activation_bytes(model, tp, mbt, seqs, measured)
    non_torch = non_torch_bytes(tp, non_torch_memory_bytes, measured)
    graphs = cudagraph_bytes(model, tp, cudagraph_memory_bytes, measured)
    draft = draft_weights_bytes(draft_model, tp)
    return MemoryTerms(weights + draft, activation, non_torch, graphs, draft)
