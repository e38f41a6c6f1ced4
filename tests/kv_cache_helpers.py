"""KV cache configurations and managers for kvcore's unit tests: groups of 16-token
blocks, full attention or a 32-token sliding window."""

from __future__ import annotations

from typing import Any

from kvcore.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from kvcore.kv_cache_manager import KVCacheManager

BLOCK = 16
"""Tokens per block."""


def kv_config(groups: tuple[str, ...] = ("full",), num_blocks: int = 64) -> KVCacheConfig:
    """``num_blocks`` blocks shared by one group per entry of ``groups`` (``full`` or
    ``sliding``)."""
    specs = {
        "full": FullAttentionSpec(block_size=BLOCK),
        "sliding": SlidingWindowSpec(block_size=BLOCK, sliding_window=32),
    }
    return KVCacheConfig(
        num_blocks, [], [KVCacheGroupSpec([f"l{i}"], specs[g]) for i, g in enumerate(groups)]
    )


def kv_manager(
    groups: tuple[str, ...] = ("full",), num_blocks: int = 64, **kw: Any
) -> KVCacheManager:
    """A manager of :func:`kv_config` (prefix caching on, 8,192-token model length);
    ``kw``: more ``KVCacheManager`` arguments."""
    return KVCacheManager(kv_config(groups, num_blocks), max_model_len=8192, **kw)
