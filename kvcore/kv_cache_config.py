"""Containers for a planned KV cache: groups, backing tensors and the block budget.

Mirrors ``KVCacheGroupSpec``, ``KVCacheTensor`` and ``KVCacheConfig`` of
``vllm/v1/kv_cache_interface.py`` (vLLM 0.33.0). Also importable from
``kvcore.kv_cache_interface``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcore.kv_cache_interface import KVCacheSpec


@dataclass(frozen=True)
class KVCacheGroupSpec:
    """Layers that share one block table (mirrors ``KVCacheGroupSpec``)."""

    layer_names: list[str]
    kv_cache_spec: KVCacheSpec


@dataclass(frozen=True)
class KVCacheTensor:
    """One backing allocation of ``size`` bytes holding the listed layers' pages
    (mirrors ``KVCacheTensor``; vLLM calls ``shared_by`` ``layers``). Layer ``l``'s block
    ``b`` starts ``offset + l * layer_stride + b * block_stride`` bytes in. Tensors of
    different groups alias the same bytes (a block id belongs to one group at a time)."""

    size: int
    shared_by: list[str] = field(default_factory=list)
    layer_stride: int = 0
    block_stride: int = 0
    offset: int = 0

    @property
    def layers(self) -> list[str]:
        return self.shared_by


@dataclass(frozen=True)
class KVCacheConfig:
    """The block budget and the groups it is split into (mirrors ``KVCacheConfig``).

    ``num_blocks`` includes the null block the block pool holds back.
    """

    num_blocks: int
    kv_cache_tensors: list[KVCacheTensor]
    kv_cache_groups: list[KVCacheGroupSpec]
