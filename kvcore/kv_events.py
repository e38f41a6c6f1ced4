"""KV cache events (mirror ``vllm/distributed/kv_events.py``, vLLM 0.33.0).

BlockPool emits them when blocks enter or leave the prefix cache; block hashes are
published as 64-bit ints (see :func:`kvcore.block_hashing.external_block_hash`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Mirrors ``vllm.distributed.kv_events.BlockStored``.

    Full blocks were registered in the prefix cache (one event per caching call)."""

    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    group_idx: int
    lora_name: str | None = None
    extra_keys: list[Any] | None = None
    medium: str = "GPU"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "BlockStored",
            "block_hashes": self.block_hashes,
            "parent_block_hash": self.parent_block_hash,
            "num_tokens": len(self.token_ids),
            "block_size": self.block_size,
            "group_idx": self.group_idx,
        }


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Mirrors ``BlockRemoved``.

    A cached block was evicted (one event per removed hash key)."""

    block_hashes: list[int]
    group_idx: int
    medium: str = "GPU"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "BlockRemoved",
            "block_hashes": self.block_hashes,
            "group_idx": self.group_idx,
        }


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """Mirrors ``AllBlocksCleared``.

    The prefix cache was reset."""

    def to_json(self) -> dict[str, Any]:
        return {"type": "AllBlocksCleared"}


KVCacheEvent = BlockStored | BlockRemoved | AllBlocksCleared
