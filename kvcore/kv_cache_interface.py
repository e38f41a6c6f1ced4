"""KV cache specs: what one attention layer stores per block.

Mirrors ``vllm/v1/kv_cache_interface.py`` (vLLM 0.33.0): ``AttentionSpec`` and its
subclasses ``FullAttentionSpec``, ``SlidingWindowSpec``, ``ChunkedLocalAttentionSpec``
and ``MLAAttentionSpec``, plus the ``KVCacheGroupSpec`` / ``KVCacheTensor`` /
``KVCacheConfig`` containers. Only the fields kvsim needs are modelled; dtypes are
strings (``"bfloat16"``, ``"float16"``, ``"float32"``, ``"fp8"`` ...), not torch dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvcore.utils import cdiv

DTYPE_SIZES: dict[str, int] = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "int8": 1,
    "uint8": 1,
}


def get_dtype_size(dtype: str) -> int:
    """Bytes per element of ``dtype`` (mirrors ``vllm.utils.torch_utils.get_dtype_size``)."""
    try:
        return DTYPE_SIZES[dtype]
    except KeyError:
        raise ValueError(
            f"unknown KV cache dtype {dtype!r}; allowed: {', '.join(sorted(DTYPE_SIZES))}"
        ) from None


@dataclass(frozen=True, kw_only=True)
class AttentionSpec:
    """Per-layer attention KV cache spec (mirrors ``AttentionSpec``).

    ``block_size`` is in tokens; ``page_size_bytes`` is the bytes one block of this
    layer occupies: ``num_kv_heads * block_size * (head_size + head_size_v) * dtype``.
    """

    block_size: int
    num_kv_heads: int = 1
    head_size: int = 1
    dtype: str = "bfloat16"
    head_size_v: int | None = None
    page_size_padded: int | None = None

    @property
    def effective_head_size_v(self) -> int:
        return self.head_size if self.head_size_v is None else self.head_size_v

    @property
    def real_page_size_bytes(self) -> int:
        return (
            self.num_kv_heads
            * self.block_size
            * (self.head_size + self.effective_head_size_v)
            * get_dtype_size(self.dtype)
        )

    @property
    def page_size_bytes(self) -> int:
        if self.page_size_padded is not None:
            return self.page_size_padded
        return self.real_page_size_bytes


@dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(AttentionSpec):
    """Full (global) attention; blocks are kept for every token (``FullAttentionSpec``)."""

    sliding_window: int | None = None
    attention_chunk_size: int | None = None

    def max_memory_usage_bytes(self, max_model_len: int) -> int:
        return cdiv(max_model_len, self.block_size) * self.page_size_bytes


@dataclass(frozen=True, kw_only=True)
class MLAAttentionSpec(FullAttentionSpec):
    """Multi-head latent attention: one latent vector per token, no separate V."""

    head_size_v: int | None = 0


@dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec(AttentionSpec):
    """Sliding-window attention of ``sliding_window`` tokens (``SlidingWindowSpec``)."""

    sliding_window: int
    extra_retained_tokens: int = 0

    def max_admission_blocks_per_request(
        self, max_in_flight_tokens: int, max_model_len: int
    ) -> int:
        """Blocks one request can hold at most (admission check and pool sizing)."""
        num_tokens = min(
            self.sliding_window - 1 + self.extra_retained_tokens + max_in_flight_tokens,
            max_model_len,
        )
        return cdiv(num_tokens, self.block_size) + 1

    def max_memory_usage_bytes(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        blocks = self.max_admission_blocks_per_request(max_in_flight_tokens, max_model_len)
        return blocks * self.page_size_bytes


@dataclass(frozen=True, kw_only=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    """Chunked local attention with chunks of ``attention_chunk_size`` tokens."""

    attention_chunk_size: int

    def max_admission_blocks_per_request(
        self, max_in_flight_tokens: int, max_model_len: int
    ) -> int:
        """Blocks one request can hold at most (admission check and pool sizing)."""
        num_tokens = min(self.attention_chunk_size + max_in_flight_tokens, max_model_len)
        return cdiv(num_tokens, self.block_size)

    def max_memory_usage_bytes(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        blocks = self.max_admission_blocks_per_request(max_in_flight_tokens, max_model_len)
        return blocks * self.page_size_bytes


@dataclass(frozen=True)
class KVCacheGroupSpec:
    """Layers that share one block table (mirrors ``KVCacheGroupSpec``)."""

    layer_names: list[str]
    kv_cache_spec: AttentionSpec


@dataclass(frozen=True)
class KVCacheTensor:
    """One backing allocation shared by the listed layers (mirrors ``KVCacheTensor``)."""

    size: int
    shared_by: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class KVCacheConfig:
    """The block budget and the groups it is split into (mirrors ``KVCacheConfig``)."""

    num_blocks: int
    kv_cache_tensors: list[KVCacheTensor]
    kv_cache_groups: list[KVCacheGroupSpec]
