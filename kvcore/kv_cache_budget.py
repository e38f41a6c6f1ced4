"""Capacity of a planned KV cache, and a one-call block budget for the CLI.

``get_max_concurrency_for_kv_cache_config``, ``get_kv_cache_capacity`` and
``generate_scheduler_kv_cache_config`` mirror ``vllm/v1/core/kv_cache_utils.py``
(vLLM 0.33.0). ``plan_kv_cache_budget`` takes the engine arguments as one
:class:`KVCacheSizing` and a model described by plain numbers:

it builds vLLM-style per-layer specs from layer counts per attention kind, then runs the
vLLM 0.33.0 planning path (``kvcore.kv_cache_planning``) for one worker (every
tensor-parallel rank holds the same layers, so one rank's budget is everybody's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvcore.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)
from kvcore.kv_cache_planning import (
    blocks_per_request,
    get_kv_cache_bytes_per_block,
    get_kv_cache_configs,
    get_layer_spec,
    max_in_flight_tokens,
)


def get_max_concurrency_for_kv_cache_config(
    kv_cache_config: KVCacheConfig, max_model_len: int, max_in_flight_tokens: int
) -> float:
    """How many requests of ``max_model_len`` tokens the whole pool holds at once:
    ``num_blocks`` (the null block included, as vLLM counts) over the blocks one request
    needs summed over groups. Mirrors ``get_max_concurrency_for_kv_cache_config``."""
    needed = blocks_per_request(
        kv_cache_config.kv_cache_groups, max_model_len, max_in_flight_tokens
    )
    return kv_cache_config.num_blocks / needed


def get_kv_cache_capacity(
    kv_cache_config: KVCacheConfig, max_model_len: int, max_in_flight_tokens: int
) -> tuple[int, float]:
    """(KV cache size in tokens, max concurrency) as vLLM logs them at startup:
    ``int(max_concurrency * max_model_len)`` tokens. Mirrors ``get_kv_cache_capacity``."""
    concurrency = get_max_concurrency_for_kv_cache_config(
        kv_cache_config, max_model_len, max_in_flight_tokens
    )
    return int(concurrency * max_model_len), concurrency


def generate_scheduler_kv_cache_config(kv_cache_configs: list[KVCacheConfig]) -> KVCacheConfig:
    """The config the scheduler's KV cache manager gets: the first worker's, with each
    ``UniformTypeKVCacheSpecs`` group replaced by its first layer's spec (all its layers
    need the same token slots). Mirrors ``generate_scheduler_kv_cache_config``."""
    if len({config.num_blocks for config in kv_cache_configs}) != 1:
        raise ValueError("all workers must have the same num_blocks")
    first = kv_cache_configs[0]
    groups = [
        KVCacheGroupSpec(list(g.layer_names), g.kv_cache_spec.first_spec)
        if isinstance(g.kv_cache_spec, UniformTypeKVCacheSpecs)
        else g
        for g in first.kv_cache_groups
    ]
    return replace(first, kv_cache_groups=groups)


def build_layer_specs(
    *,
    num_full_layers: int = 0,
    num_sliding_window_layers: int = 0,
    num_chunked_local_layers: int = 0,
    num_mla_layers: int = 0,
    num_kv_heads: int = 1,
    head_size: int = 128,
    dtype: str = "bfloat16",
    block_size: int = 16,
    sliding_window: int | None = None,
    attention_chunk_size: int | None = None,
    mla_head_size: int | None = None,
) -> dict[str, KVCacheSpec]:
    """``{layer_name: spec}`` for one worker.

    ``num_kv_heads`` is per worker (after tensor parallelism); ``head_size`` and
    ``mla_head_size`` (latent + rope width, default ``head_size``) are elements;
    ``sliding_window`` / ``attention_chunk_size`` are tokens and required when layers of
    that kind are asked for. MLA layers always have one KV head.
    """
    counts = {
        "num_full_layers": num_full_layers,
        "num_sliding_window_layers": num_sliding_window_layers,
        "num_chunked_local_layers": num_chunked_local_layers,
        "num_mla_layers": num_mla_layers,
    }
    for name, count in counts.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {count!r}")
    if num_sliding_window_layers and sliding_window is None:
        raise ValueError("sliding_window (tokens) is required for sliding-window layers")
    if num_chunked_local_layers and attention_chunk_size is None:
        raise ValueError("attention_chunk_size (tokens) is required for chunked local layers")
    common = {"block_size": block_size, "dtype": dtype}
    attn = {**common, "num_kv_heads": num_kv_heads, "head_size": head_size}
    specs: dict[str, KVCacheSpec] = {}
    for i in range(num_full_layers):
        specs[f"full.{i}"] = FullAttentionSpec(**attn)
    for i in range(num_sliding_window_layers):
        assert sliding_window is not None
        specs[f"sliding_window.{i}"] = SlidingWindowSpec(**attn, sliding_window=sliding_window)
    for i in range(num_chunked_local_layers):
        assert attention_chunk_size is not None
        specs[f"chunked_local.{i}"] = ChunkedLocalAttentionSpec(
            **attn, attention_chunk_size=attention_chunk_size
        )
    for i in range(num_mla_layers):
        specs[f"mla.{i}"] = MLAAttentionSpec(
            **common, num_kv_heads=1, head_size=mla_head_size or head_size
        )
    if not specs:
        raise ValueError("the model needs at least one layer (all layer counts are 0)")
    return specs


@dataclass(frozen=True)
class KVCacheBudget:
    """The block budget of one worker and the terms it was derived from.

    ``num_blocks`` counts the null block; ``bytes_per_block`` is what one block id costs
    across all layers of the widest group; ``layer_page_size_bytes`` are the per-layer
    pages after unification and ``block_sizes`` the tokens per block of each group;
    ``max_concurrency`` is how many requests of ``max_model_len`` tokens fit at once and
    ``kv_cache_size_tokens`` the matching token capacity (as vLLM logs them).
    """

    num_blocks: int
    bytes_per_block: int
    layer_page_size_bytes: dict[str, int]
    block_sizes: list[int]
    num_groups: int
    layers_per_group: list[int]
    max_model_len: int
    max_in_flight_tokens: int
    max_concurrency: float
    kv_cache_size_tokens: int
    kv_cache_config: KVCacheConfig


@dataclass(frozen=True)
class KVCacheSizing:
    """The engine arguments a KV budget plan depends on, resolved (vLLM 0.33.0 names):
    tokens of one request (``max_model_len``) and of one step
    (``max_num_batched_tokens``), tokens per block, tensor-parallel ranks, the block
    count that replaces the memory's (``num_gpu_blocks_override``) and whether the
    engine runs the async-scheduling loop (a second step's tokens in flight).

    kvcore imports nothing of the simulator: its engine configuration is turned into
    one of these at the edge (``calibrate.budget.compute_kv_budget``). ValueError on a
    value vLLM refuses.
    """

    max_model_len: int
    max_num_batched_tokens: int
    block_size: int = 16
    tensor_parallel_size: int = 1
    num_gpu_blocks_override: int | None = None
    async_scheduling: bool = False

    def __post_init__(self) -> None:
        tp = self.tensor_parallel_size
        if tp < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {tp!r}")
        for name, value in (
            ("max_model_len", self.max_model_len),
            ("max_num_batched_tokens", self.max_num_batched_tokens),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer (tokens), got {value!r}")


def plan_kv_cache_budget(
    *,
    available_memory_bytes: int,
    sizing: KVCacheSizing,
    num_full_layers: int = 0,
    num_sliding_window_layers: int = 0,
    num_chunked_local_layers: int = 0,
    num_mla_layers: int = 0,
    num_kv_heads: int = 1,
    head_size: int = 128,
    dtype: str = "bfloat16",
    sliding_window: int | None = None,
    attention_chunk_size: int | None = None,
    mla_head_size: int | None = None,
    disable_hybrid_kv_cache_manager: bool | None = None,
) -> KVCacheBudget:
    """The KV block budget per GPU for ``available_memory_bytes`` of KV cache memory,
    for the engine arguments of ``sizing`` and a model of the given layer counts.

    ``num_kv_heads`` is the model's total; each tensor-parallel rank holds
    ``max(1, num_kv_heads // tensor_parallel_size)``. ``disable_hybrid_kv_cache_manager``
    None follows vLLM's default (disabled when the model has chunked local attention).
    Raises ``InsufficientKVCacheMemoryError`` when one ``max_model_len`` request does not
    fit, ValueError on bad input.
    """
    specs = build_layer_specs(
        num_full_layers=num_full_layers,
        num_sliding_window_layers=num_sliding_window_layers,
        num_chunked_local_layers=num_chunked_local_layers,
        num_mla_layers=num_mla_layers,
        num_kv_heads=max(1, num_kv_heads // sizing.tensor_parallel_size),
        head_size=head_size,
        dtype=dtype,
        block_size=sizing.block_size,
        sliding_window=sliding_window,
        attention_chunk_size=attention_chunk_size,
        mla_head_size=mla_head_size,
    )
    if disable_hybrid_kv_cache_manager is None:
        disable_hybrid_kv_cache_manager = num_chunked_local_layers > 0
    return plan_layer_budget(specs, available_memory_bytes, sizing, disable_hybrid_kv_cache_manager)


def plan_layer_budget(
    specs: dict[str, KVCacheSpec],
    available_memory_bytes: int,
    sizing: KVCacheSizing,
    disable_hybrid_kv_cache_manager: bool = False,
    scheduler_view: bool = False,
) -> KVCacheBudget:
    """The KV block budget of one worker whose layers have ``specs`` (``{layer name:
    spec}``), for ``available_memory_bytes`` and the engine arguments of ``sizing``
    (vLLM's ``get_kv_cache_configs`` on one worker). ``scheduler_view``: the budget's
    ``kv_cache_config`` is the scheduler's (one spec per group,
    ``generate_scheduler_kv_cache_config``), as needed when a group mixes page sizes.
    Raises ``InsufficientKVCacheMemoryError`` when one ``max_model_len`` request does
    not fit."""
    max_model_len = sizing.max_model_len
    in_flight = max_in_flight_tokens(
        sizing.max_num_batched_tokens, async_scheduling=sizing.async_scheduling
    )
    (config,) = get_kv_cache_configs(
        [specs],
        [available_memory_bytes],
        max_model_len,
        in_flight,
        num_gpu_blocks_override=sizing.num_gpu_blocks_override,
        disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
    )
    groups = config.kv_cache_groups
    tokens, concurrency = get_kv_cache_capacity(config, max_model_len, in_flight)
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
        max_model_len=max_model_len,
        max_in_flight_tokens=in_flight,
        max_concurrency=concurrency,
        kv_cache_size_tokens=tokens,
        kv_cache_config=generate_scheduler_kv_cache_config([config]) if scheduler_view else config,
    )
