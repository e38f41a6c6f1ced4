"""Grouping layers into KV cache groups (layers that share one block table).

Mirrors the grouping half of ``vllm/v1/core/kv_cache_planning.py`` (vLLM 0.33.0):
``get_kv_cache_groups``, ``is_kv_cache_spec_uniform``, ``unify_kv_cache_spec_page_size``,
``unify_hybrid_kv_cache_specs`` and ``_get_kv_cache_groups_uniform_page_size``, for the
default layer-outermost KV cache layout (no block-outermost packing, HiSparse or
hidden-state layers).
"""

from __future__ import annotations

import logging
from dataclasses import fields, replace

from kvcore.kv_cache_interface import (
    AttentionSpec,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheGroupSpec,
    KVCacheSpec,
    KVCacheSpecMismatchError,
    MLAAttentionSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)
from kvcore.utils import cdiv

logger = logging.getLogger(__name__)


def create_kv_cache_group_specs(
    kv_cache_spec: dict[str, KVCacheSpec], grouped_layer_names: list[list[str]]
) -> list[KVCacheGroupSpec]:
    """One ``KVCacheGroupSpec`` per list of layer names, with the layers' merged spec."""
    groups = []
    for names in grouped_layer_names:
        layer_specs = [kv_cache_spec[name] for name in names]
        groups.append(KVCacheGroupSpec(list(names), type(layer_specs[0]).merge(layer_specs)))
    return groups


def is_kv_cache_spec_uniform(kv_cache_spec: dict[str, KVCacheSpec]) -> bool:
    """Whether every layer's spec merges into one (full attention with and without a
    recorded window counts as one). A window-size conflict raises ValueError, as in vLLM."""
    if not kv_cache_spec:
        return True
    specs = list(kv_cache_spec.values())
    try:
        type(specs[0]).merge(specs)
    except KVCacheSpecMismatchError:
        return False
    return True


def unify_kv_cache_spec_page_size(
    kv_cache_spec: dict[str, KVCacheSpec],
) -> dict[str, KVCacheSpec]:
    """Give every layer the largest page size (bytes per block).

    A smaller page that divides the largest grows its block size by the ratio; otherwise
    non-MLA attention layers are padded to the largest page. MLA layers that cannot grow
    raise ``NotImplementedError``.
    """
    page_sizes = {spec.page_size_bytes for spec in kv_cache_spec.values()}
    if len(page_sizes) <= 1:
        return kv_cache_spec
    max_page = max(page_sizes)
    unified: dict[str, KVCacheSpec] = {}
    for name, spec in kv_cache_spec.items():
        page = spec.page_size_bytes
        if page == max_page:
            new_spec = spec
        elif max_page % page == 0:
            new_spec = spec.copy_with_new_block_size(spec.block_size * (max_page // page))
        elif isinstance(spec, AttentionSpec) and not isinstance(spec, MLAAttentionSpec):
            new_spec = replace(spec, page_size_padded=max_page)
        else:
            raise NotImplementedError(
                f"layer {name}: page size {page} bytes does not divide the largest page "
                f"({max_page} bytes) and MLA pages cannot be padded"
            )
        assert new_spec.page_size_bytes == max_page
        unified[name] = new_spec
    return unified


def _promote_local_kv_cache_specs(
    kv_cache_spec: dict[str, KVCacheSpec],
) -> dict[str, KVCacheSpec]:
    """Manage sliding-window / chunked-local layers as full attention (allocation only).

    Only done when the model also has full attention layers; raises ValueError when the
    result still is not one type.
    """
    promoted = dict(kv_cache_spec)
    if is_kv_cache_spec_uniform(promoted) or UniformTypeKVCacheSpecs.is_uniform_type(promoted):
        return promoted
    specs = list(promoted.values())
    has_full = any(isinstance(s, FullAttentionSpec) for s in specs)
    has_local = any(isinstance(s, (SlidingWindowSpec, ChunkedLocalAttentionSpec)) for s in specs)
    full_block_sizes = {s.block_size for s in specs if isinstance(s, FullAttentionSpec)}
    full_block_size = next(iter(full_block_sizes)) if len(full_block_sizes) == 1 else None
    if has_full and has_local:
        for name, spec in kv_cache_spec.items():
            if not isinstance(spec, (SlidingWindowSpec, ChunkedLocalAttentionSpec)):
                continue
            block_size = full_block_size or spec.block_size
            padded = None
            if spec.page_size_padded is not None:
                grown = spec.unpadded_page_size_bytes * block_size // spec.block_size
                padded = max(spec.page_size_padded, grown)
            kwargs = {
                f.name: getattr(spec, f.name)
                for f in fields(spec)
                if f.init and f.name != "extra_retained_tokens"
            }
            kwargs.update(block_size=block_size, page_size_padded=padded)
            promoted[name] = FullAttentionSpec(**kwargs)
    if not (
        is_kv_cache_spec_uniform(promoted) or UniformTypeKVCacheSpecs.is_uniform_type(promoted)
    ):
        raise ValueError("failed to promote local KV cache specs to one unified type")
    return promoted


def unify_hybrid_kv_cache_specs(kv_cache_spec: dict[str, KVCacheSpec]) -> None:
    """Hybrid manager disabled: treat local-attention layers as full attention, in place."""
    promoted = _promote_local_kv_cache_specs(kv_cache_spec)
    if promoted != kv_cache_spec:
        logger.warning(
            "hybrid KV cache manager disabled: local-attention layers keep KV for all tokens"
        )
        kv_cache_spec.update(promoted)


def _try_get_full_allocation_fallback_groups(
    kv_cache_spec: dict[str, KVCacheSpec],
) -> list[KVCacheGroupSpec] | None:
    """MLA next to sliding-window layers whose pages cannot be unified: one group that
    allocates the sliding-window layers as full attention. None if not applicable."""
    specs = list(kv_cache_spec.values())
    if any(isinstance(s, ChunkedLocalAttentionSpec) for s in specs):
        return None
    has_mla = any(isinstance(s, MLAAttentionSpec) for s in specs)
    has_swa = any(isinstance(s, SlidingWindowSpec) for s in specs)
    if not (has_mla and has_swa):
        return None
    try:
        promoted = _promote_local_kv_cache_specs(kv_cache_spec)
    except ValueError:
        return None
    uniform = UniformTypeKVCacheSpecs.from_specs(promoted)
    if uniform is None:
        return None
    return [KVCacheGroupSpec(list(uniform.kv_cache_specs), uniform)]


def _get_kv_cache_groups_uniform_page_size(
    kv_cache_spec: dict[str, KVCacheSpec],
) -> list[KVCacheGroupSpec]:
    """Split layers of several types (one page size) into groups of equal layer counts.

    Layers are bucketed by mergeable spec; the group size is the smallest bucket (or the
    largest, when that is under 1.5x the smallest); each bucket is cut into
    ``cdiv(len, group_size)`` groups taking every ``num_groups``-th layer, so the last
    groups may be short ("padding" layers that still cost a page per block).
    """
    same_spec: dict[KVCacheSpec, list[str]] = {}
    for name, spec in kv_cache_spec.items():
        same_spec.setdefault(spec, []).append(name)

    layer_buckets: list[list[str]] = []
    spec_buckets: list[list[KVCacheSpec]] = []
    for spec, names in same_spec.items():
        for bucket_names, bucket_specs in zip(layer_buckets, spec_buckets, strict=True):
            try:
                type(bucket_specs[0]).merge([*bucket_specs, spec])
            except ValueError:  # includes KVCacheSpecMismatchError
                continue
            bucket_names.extend(names)
            bucket_specs.append(spec)
            break
        else:
            layer_buckets.append(list(names))
            spec_buckets.append([spec])

    min_layers = min(len(names) for names in layer_buckets)
    max_layers = max(len(names) for names in layer_buckets)
    group_size = max_layers if max_layers < min_layers * 1.5 else min_layers
    grouped: list[list[str]] = []
    for names in layer_buckets:
        num_groups = cdiv(len(names), group_size)
        grouped.extend(names[i::num_groups] for i in range(num_groups))
    return create_kv_cache_group_specs(kv_cache_spec, grouped)


def get_kv_cache_groups(
    kv_cache_spec: dict[str, KVCacheSpec],
    disable_hybrid_kv_cache_manager: bool = False,
) -> list[KVCacheGroupSpec]:
    """Split a model's layers (``{layer_name: spec}``) into KV cache groups.

    Identical specs give one group; one attention type with different page sizes gives
    one ``UniformTypeKVCacheSpecs`` group; otherwise pages are unified and layers split
    into equal-size groups. With ``disable_hybrid_kv_cache_manager`` local-attention
    layers are first turned into full attention. ``kv_cache_spec`` may be updated in
    place (as vLLM does). Mirrors ``get_kv_cache_groups``.
    """
    if disable_hybrid_kv_cache_manager:
        unify_hybrid_kv_cache_specs(kv_cache_spec)
    if not kv_cache_spec:
        return []
    if is_kv_cache_spec_uniform(kv_cache_spec):
        return create_kv_cache_group_specs(kv_cache_spec, [list(kv_cache_spec)])
    uniform = UniformTypeKVCacheSpecs.from_specs(kv_cache_spec)
    if uniform is not None:
        return [KVCacheGroupSpec(list(uniform.kv_cache_specs), uniform)]
    try:
        unified = unify_kv_cache_spec_page_size(kv_cache_spec)
    except NotImplementedError:
        fallback = _try_get_full_allocation_fallback_groups(kv_cache_spec)
        if fallback is None:
            raise
        logger.warning("page sizes cannot be unified; sliding-window layers use full allocation")
        return fallback
    return _get_kv_cache_groups_uniform_page_size(unified)
