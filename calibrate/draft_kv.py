"""The KV cache of a target model with a draft model beside it (speculative decoding
with ``method: draft_model``).

vLLM 0.33.0 loads the draft model into the same worker: its weights count in the
profiled non-KV memory, and its attention layers join the target's in the worker's
``get_kv_cache_spec`` (each with its own KV, the draft's head shape), so the one KV
budget is planned over both models' layers (``get_kv_cache_configs``). With layers of
one kind but different page sizes (a Llama-3.2-1B draft of a Llama-3.1-8B target: 64
against 128 head dims) they form one group of ``UniformTypeKVCacheSpecs``: a block id
holds the target's and the draft's pages, so every block costs both and the pool
holds fewer blocks for the same memory. The scheduler sees the group as its first
layer's spec (``generate_scheduler_kv_cache_config``): token slots are the same for
every layer of it.

Terms not modelled: the draft's activation peak and CUDA-graph memory (small next to
the target's; the target's estimates are used unchanged).
"""

from __future__ import annotations

from calibrate.model_spec import ModelSpec
from kvcore.kv_cache_budget import KVCacheBudget, KVCacheSizing, plan_layer_budget

DRAFT_LAYER_PREFIX = "draft."
"""Prefix of the draft model's layer names in the combined layer specs."""


def plan_with_draft(
    available_memory_bytes: int,
    sizing: KVCacheSizing,
    target: ModelSpec,
    draft: ModelSpec,
    kv_cache_dtype: str = "auto",
) -> KVCacheBudget:
    """The block budget of one worker holding ``target``'s and ``draft``'s KV layers
    (bytes per rank; ``sizing`` as ``kvcore.kv_cache_budget.plan_kv_cache_budget``
    takes it). Raises ``InsufficientKVCacheMemoryError`` when one ``max_model_len``
    request does not fit."""
    tp = sizing.tensor_parallel_size
    bs = sizing.block_size
    specs = dict(target.kv_layer_specs(bs, kv_cache_dtype, tp))
    for name, spec in draft.kv_layer_specs(bs, kv_cache_dtype, tp).items():
        specs[DRAFT_LAYER_PREFIX + name] = spec
    # What the scheduler's KV cache manager gets: one spec per group (vLLM's
    # generate_scheduler_kv_cache_config; the draft's pages ride on each block).
    return plan_layer_budget(specs, available_memory_bytes, sizing, scheduler_view=True)
