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
from kvcore.kv_cache_budget import (
    KVCacheBudget,
    KVCacheSizing,
    generate_scheduler_kv_cache_config,
    get_kv_cache_capacity,
)
from kvcore.kv_cache_planning import (
    get_kv_cache_bytes_per_block,
    get_kv_cache_configs,
    get_layer_spec,
    max_in_flight_tokens,
)

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
    in_flight = max_in_flight_tokens(
        sizing.max_num_batched_tokens, async_scheduling=sizing.async_scheduling
    )
    (config,) = get_kv_cache_configs(
        [specs],
        [available_memory_bytes],
        sizing.max_model_len,
        in_flight,
        num_gpu_blocks_override=sizing.num_gpu_blocks_override,
    )
    groups = config.kv_cache_groups
    tokens, concurrency = get_kv_cache_capacity(config, sizing.max_model_len, in_flight)
    return KVCacheBudget(
        num_blocks=config.num_blocks,
        bytes_per_block=get_kv_cache_bytes_per_block(groups),
        layer_page_size_bytes={
            name: get_layer_spec(group, name).page_size_bytes
            for group in groups
            for name in group.layer_names
        },
        block_sizes=[group.kv_cache_spec.block_size for group in groups],
        num_groups=len(groups),
        layers_per_group=[len(group.layer_names) for group in groups],
        max_model_len=sizing.max_model_len,
        max_in_flight_tokens=in_flight,
        max_concurrency=concurrency,
        kv_cache_size_tokens=tokens,
        # What the scheduler's KV cache manager gets: one spec per group (vLLM's
        # generate_scheduler_kv_cache_config; the draft's pages ride on each block).
        kv_cache_config=generate_scheduler_kv_cache_config([config]),
    )
