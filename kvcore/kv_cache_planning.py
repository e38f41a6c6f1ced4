"""The block budget: how many KV cache blocks fit in the memory left for the KV cache.

Mirrors the sizing half of ``vllm/v1/core/kv_cache_planning.py`` (vLLM 0.33.0) for the
default layer-outermost layout (``LBNHC``): ``_get_kv_cache_bytes_per_block``,
``get_kv_cache_config_from_groups``, ``get_global_kv_cache_groups``,
``get_kv_cache_configs`` (minimum over workers, ``num_gpu_blocks_override``, null-block
reservation in the memory check). Plain arguments replace ``VllmConfig``. Grouping lives
in ``kvcore.kv_cache_grouping``; max concurrency and the one-call entry point for users
(``plan_kv_cache_budget``) in ``kvcore.kv_cache_budget``.
"""

from __future__ import annotations

from dataclasses import replace

from kvcore.kv_cache_grouping import get_kv_cache_groups
from kvcore.kv_cache_interface import (
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheSpec,
    KVCacheTensor,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)
from kvcore.utils import cdiv


class InsufficientKVCacheMemoryError(ValueError):
    """Not even one request of ``max_model_len`` tokens fits in the KV cache memory."""

    def __init__(self, message: str, needed_bytes: int, available_bytes: int, max_len: int):
        super().__init__(message)
        self.needed_bytes = needed_bytes
        self.available_bytes = available_bytes
        self.estimated_max_model_len = max_len


def max_concurrent_batches(
    pipeline_parallel_size: int = 1,
    async_scheduling: bool = False,
    use_v2_model_runner: bool = False,
) -> int:
    """Batches the engine keeps in flight (mirrors ``VllmConfig.max_concurrent_batches``).

    Pipeline parallelism needs one per stage; async scheduling one more, so that the
    next step is scheduled while the current one runs (2 without pipeline parallelism,
    with either model runner). It is also the size of the engine core's batch queue,
    used whenever it exceeds 1."""
    if async_scheduling:
        if use_v2_model_runner:
            return pipeline_parallel_size + 1
        if pipeline_parallel_size <= 1:
            return 2
    return pipeline_parallel_size


def max_in_flight_tokens(
    max_num_batched_tokens: int,
    pipeline_parallel_size: int = 1,
    async_scheduling: bool = False,
    use_v2_model_runner: bool = False,
) -> int:
    """Tokens scheduled but not yet settled: one ``max_num_batched_tokens`` batch per
    concurrent step (mirrors ``VllmConfig.max_in_flight_tokens``)."""
    concurrent = max_concurrent_batches(
        pipeline_parallel_size, async_scheduling, use_v2_model_runner
    )
    return concurrent * max_num_batched_tokens


def get_layer_spec(group: KVCacheGroupSpec, layer_name: str) -> KVCacheSpec:
    """The spec of one layer of ``group`` (its own, inside a ``UniformTypeKVCacheSpecs``)."""
    spec = group.kv_cache_spec
    if isinstance(spec, UniformTypeKVCacheSpecs):
        return spec.kv_cache_specs[layer_name]
    return spec


def get_kv_cache_bytes_per_block(kv_cache_groups: list[KVCacheGroupSpec]) -> int:
    """Bytes one block id costs: the largest group's sum of its layers' pages.

    Groups share block ids and alias the same memory, so the widest group sets the size.
    """
    return max(
        sum(get_layer_spec(group, name).page_size_bytes for name in group.layer_names)
        for group in kv_cache_groups
    )


def _check_layout(kv_cache_groups: list[KVCacheGroupSpec]) -> None:
    pages = {
        get_layer_spec(group, name).page_size_bytes
        for group in kv_cache_groups
        for name in group.layer_names
    }
    if len(pages) > 1 and len(kv_cache_groups) > 1:
        raise ValueError(
            f"the layer-outermost KV cache layout cannot hold several groups with mixed "
            f"page sizes ({sorted(pages)} bytes)"
        )


def get_kv_cache_config_from_groups(
    kv_cache_groups: list[KVCacheGroupSpec],
    available_memory: int,
    num_gpu_blocks_override: int | None = None,
) -> KVCacheConfig:
    """The KV cache config for ``available_memory`` bytes on one worker.

    ``num_blocks = available_memory // bytes_per_block`` unless ``num_gpu_blocks_override``
    is given. Each group gets one tensor per distinct layer spec, of
    ``bytes_per_block * num_blocks`` bytes, all groups aliasing from byte 0. No groups
    (attention-free model) gives one block: the null block.
    """
    if not kv_cache_groups:
        return KVCacheConfig(num_blocks=1, kv_cache_tensors=[], kv_cache_groups=[])
    _check_layout(kv_cache_groups)
    bytes_per_block = get_kv_cache_bytes_per_block(kv_cache_groups)
    num_blocks = available_memory // bytes_per_block
    if num_gpu_blocks_override is not None:
        num_blocks = num_gpu_blocks_override
    size = bytes_per_block * num_blocks
    tensors = []
    for group in kv_cache_groups:
        layers_by_spec: dict[KVCacheSpec, list[str]] = {}
        for name in group.layer_names:
            layers_by_spec.setdefault(get_layer_spec(group, name), []).append(name)
        offset = 0
        for spec, names in layers_by_spec.items():
            block_stride = spec.page_size_bytes
            layer_stride = block_stride * num_blocks
            tensors.append(KVCacheTensor(size, names, layer_stride, block_stride, offset))
            offset += len(names) * layer_stride
    return KVCacheConfig(num_blocks, tensors, list(kv_cache_groups))


def blocks_per_request(
    kv_cache_groups: list[KVCacheGroupSpec], max_model_len: int, max_in_flight_tokens: int
) -> int:
    """Blocks one request of ``max_model_len`` tokens can hold, summed over the groups."""
    total = 0
    for group in kv_cache_groups:
        spec = group.kv_cache_spec
        if isinstance(spec, UniformTypeKVCacheSpecs):
            total += spec.max_memory_usage_pages(max_model_len, max_in_flight_tokens)
        else:
            usage = spec.max_memory_usage_bytes(max_model_len, max_in_flight_tokens)
            total += cdiv(usage, spec.page_size_bytes)
    return total


def max_memory_usage_bytes_from_groups(
    kv_cache_groups: list[KVCacheGroupSpec], max_model_len: int, max_in_flight_tokens: int
) -> int:
    """Bytes of the shared pool one request of ``max_model_len`` tokens can use."""
    if not kv_cache_groups:
        return 0
    per_block = get_kv_cache_bytes_per_block(kv_cache_groups)
    return per_block * blocks_per_request(kv_cache_groups, max_model_len, max_in_flight_tokens)


def estimate_max_model_len(
    kv_cache_groups: list[KVCacheGroupSpec],
    available_memory: int,
    max_model_len: int,
    max_in_flight_tokens: int,
) -> int:
    """Longest request (tokens, at most ``max_model_len``) whose KV fits in
    ``available_memory`` bytes; 0 if not even one token fits (binary search, as vLLM)."""

    def fits(length: int) -> bool:
        usage = max_memory_usage_bytes_from_groups(kv_cache_groups, length, max_in_flight_tokens)
        return usage <= available_memory

    if not fits(1):
        return 0
    lo, hi, best = 1, max_model_len, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def check_enough_kv_cache_memory(
    kv_cache_groups: list[KVCacheGroupSpec],
    available_memory: int,
    max_model_len: int,
    max_in_flight_tokens: int,
) -> None:
    """Raise ``InsufficientKVCacheMemoryError`` unless one request of ``max_model_len``
    tokens fits in ``available_memory`` bytes (the caller subtracts the null block)."""
    if available_memory <= 0:
        raise InsufficientKVCacheMemoryError(
            "no memory is left for the KV cache blocks", 0, available_memory, 0
        )
    needed = max_memory_usage_bytes_from_groups(
        kv_cache_groups, max_model_len, max_in_flight_tokens
    )
    if needed > available_memory:
        estimate = estimate_max_model_len(
            kv_cache_groups, available_memory, max_model_len, max_in_flight_tokens
        )
        raise InsufficientKVCacheMemoryError(
            f"one request of max_model_len={max_model_len} tokens needs {needed} bytes of KV "
            f"cache but only {available_memory} bytes are available; the longest that fits "
            f"is {estimate} tokens",
            needed,
            available_memory,
            estimate,
        )


def _merge_worker_specs(kv_cache_specs: list[dict[str, KVCacheSpec]]) -> dict[str, KVCacheSpec]:
    merged: dict[str, KVCacheSpec] = {}
    for worker in kv_cache_specs:
        for name, spec in worker.items():
            if merged.setdefault(name, spec) != spec:
                raise ValueError(f"layer {name!r} has different KV cache specs across workers")
    return merged


def get_global_kv_cache_groups(
    kv_cache_specs: list[dict[str, KVCacheSpec]],
    disable_hybrid_kv_cache_manager: bool = False,
    num_prefill_lookahead_tokens: int = 0,
) -> list[KVCacheGroupSpec]:
    """Groups for the whole model from every worker's ``{layer_name: spec}`` (pipeline
    stages hold different layers; tensor-parallel ranks hold the same). Every
    sliding-window layer retains ``max(0, num_prefill_lookahead_tokens - 1)`` extra tokens
    (speculative decoding). Mirrors ``get_global_kv_cache_groups``."""
    merged = _merge_worker_specs(kv_cache_specs)
    retained = max(0, num_prefill_lookahead_tokens - 1)
    for name, spec in merged.items():
        if isinstance(spec, SlidingWindowSpec):
            merged[name] = replace(spec, extra_retained_tokens=retained)
    return get_kv_cache_groups(merged, disable_hybrid_kv_cache_manager)


def _project_groups(
    groups: list[KVCacheGroupSpec], worker_spec: dict[str, KVCacheSpec]
) -> list[KVCacheGroupSpec]:
    projected = []
    for group in groups:
        names = [name for name in group.layer_names if name in worker_spec]
        if len(names) == len(group.layer_names):
            projected.append(group)
            continue
        spec = group.kv_cache_spec
        if names and isinstance(spec, UniformTypeKVCacheSpecs):
            inner = {name: spec.kv_cache_specs[name] for name in names}
            spec = UniformTypeKVCacheSpecs(block_size=spec.block_size, kv_cache_specs=inner)
        projected.append(KVCacheGroupSpec(names, spec))
    return projected


def get_kv_cache_configs(
    kv_cache_specs: list[dict[str, KVCacheSpec]],
    available_memory: list[int],
    max_model_len: int,
    max_in_flight_tokens: int,
    num_gpu_blocks_override: int | None = None,
    disable_hybrid_kv_cache_manager: bool = False,
    num_prefill_lookahead_tokens: int = 0,
    global_kv_cache_groups: list[KVCacheGroupSpec] | None = None,
) -> list[KVCacheConfig]:
    """One KV cache config per worker, all with the smallest worker's ``num_blocks``.

    ``kv_cache_specs[i]`` / ``available_memory[i]`` (bytes) describe worker ``i``. Each
    worker must fit one request of ``max_model_len`` tokens after holding back the null
    block, else ``InsufficientKVCacheMemoryError``; ``num_gpu_blocks_override`` replaces
    the memory-derived block count. Mirrors ``get_kv_cache_configs``.
    """
    if len(kv_cache_specs) != len(available_memory):
        raise ValueError("kv_cache_specs and available_memory need one entry per worker")
    groups = global_kv_cache_groups
    if groups is None:
        groups = get_global_kv_cache_groups(
            kv_cache_specs, disable_hybrid_kv_cache_manager, num_prefill_lookahead_tokens
        )
    projected = [_project_groups(groups, worker) for worker in kv_cache_specs]
    memory = list(available_memory)
    if num_gpu_blocks_override is not None:
        memory = [
            num_gpu_blocks_override * get_kv_cache_bytes_per_block(g) if g else m
            for g, m in zip(projected, memory, strict=True)
        ]
    for worker_groups, worker_memory in zip(projected, memory, strict=True):
        if worker_groups:
            null_block = get_kv_cache_bytes_per_block(worker_groups)
            check_enough_kv_cache_memory(
                worker_groups, worker_memory - null_block, max_model_len, max_in_flight_tokens
            )
    configs = [
        get_kv_cache_config_from_groups(g, m, num_gpu_blocks_override)
        for g, m in zip(projected, memory, strict=True)
    ]
    min_blocks = min(config.num_blocks for config in configs)
    return [
        config
        if config.num_blocks == min_blocks
        else _replan(config.kv_cache_groups, min_blocks, num_gpu_blocks_override)
        for config in configs
    ]


def _replan(groups: list[KVCacheGroupSpec], num_blocks: int, override: int | None) -> KVCacheConfig:
    if not groups:
        return get_kv_cache_config_from_groups(groups, 0)
    per_block = get_kv_cache_bytes_per_block(groups)
    return get_kv_cache_config_from_groups(groups, num_blocks * per_block, override)
