"""KV cache specs: what one attention layer stores per block.

Mirrors ``vllm/v1/kv_cache_interface.py`` (vLLM 0.33.0): ``KVCacheSpec``, ``AttentionSpec``
and its subclasses ``FullAttentionSpec``, ``MLAAttentionSpec``, ``SlidingWindowSpec`` and
``ChunkedLocalAttentionSpec`` and ``UniformTypeKVCacheSpecs``. The ``KVCacheGroupSpec`` /
``KVCacheTensor`` / ``KVCacheConfig`` containers (``kvcore.kv_cache_config``) and the dtype
table (``kvcore.kv_cache_dtypes``) are re-exported here. Only what sizing and the managers need is
modelled (no DCP, Mamba, HiSparse or DeepSeek-V4 fields); dtypes are strings
(``"bfloat16"``, ``"float16"``, ``"float32"``, ``"fp8"`` ...), not torch dtypes.

Units: ``block_size`` and windows are tokens; ``*_bytes`` are bytes; pages are per layer
and per block.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeVar

from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
from kvcore.kv_cache_dtypes import DTYPE_SIZES, get_dtype_size
from kvcore.utils import cdiv

__all__ = [
    "DTYPE_SIZES",
    "AttentionSpec",
    "ChunkedLocalAttentionSpec",
    "FullAttentionSpec",
    "KVCacheConfig",
    "KVCacheGroupSpec",
    "KVCacheSpec",
    "KVCacheSpecMismatchError",
    "KVCacheTensor",
    "MLAAttentionSpec",
    "SlidingWindowSpec",
    "UniformTypeKVCacheSpecs",
    "get_dtype_size",
]

_S = TypeVar("_S", bound="KVCacheSpec")


class KVCacheSpecMismatchError(ValueError):
    """Specs that cannot share one KV cache group (vLLM signals this with an assert)."""


def _require_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {kind}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class KVCacheSpec:
    """Base of all per-layer KV cache formats (mirrors ``KVCacheSpec``).

    ``block_size`` is the number of tokens one block holds.
    """

    block_size: int

    def __post_init__(self) -> None:
        _require_int("block_size", self.block_size, 1)

    @property
    def page_size_bytes(self) -> int:
        """Bytes one block of this layer occupies."""
        raise NotImplementedError

    def max_memory_usage_bytes(self, max_model_len: int, max_in_flight_tokens: int = 0) -> int:
        """Most bytes one request can hold in this layer (``max_in_flight_tokens``: tokens
        scheduled but not yet settled, which local-attention layers must also hold)."""
        raise NotImplementedError

    def max_num_blocks_per_req(self, max_len: int) -> int:
        """Block-table row length (blocks) for a request of ``max_len`` tokens."""
        return cdiv(max_len, self.block_size)

    def copy_with_new_block_size(self: _S, block_size: int) -> _S:
        """The same spec with ``block_size`` (tokens) replaced."""
        return replace(self, block_size=block_size)

    @classmethod
    def merge(cls, specs: list[_S]) -> _S:
        """One spec for a group of layers; raises ``KVCacheSpecMismatchError`` unless equal."""
        if any(spec != specs[0] for spec in specs[1:]):
            raise KVCacheSpecMismatchError("all layers of one KV cache group must be the same")
        return specs[0]

    def uniform_type_key(self) -> object:
        """Specs with equal keys always need the same number of token slots.

        Plays the role of vLLM's ``is_uniform_with_collection`` plus the spec registry's
        ``uniform_type_base_spec``.
        """
        return type(self)


@dataclass(frozen=True, kw_only=True)
class AttentionSpec(KVCacheSpec):
    """Per-layer attention KV cache spec (mirrors ``AttentionSpec``).

    ``page_size_bytes = num_kv_heads * block_size * (head_size + head_size_v) * dtype
    bytes``, or ``page_size_padded`` when set. ``head_size_v`` defaults to ``head_size``.
    """

    num_kv_heads: int = 1
    head_size: int = 1
    dtype: str = "bfloat16"
    head_size_v: int | None = None
    page_size_padded: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _require_int("num_kv_heads", self.num_kv_heads, 1)
        _require_int("head_size", self.head_size, 1)
        get_dtype_size(self.dtype)
        if self.head_size_v is None:
            object.__setattr__(self, "head_size_v", self.head_size)
        _require_int("head_size_v", self.head_size_v, 0)
        if self.page_size_padded is not None:
            _require_int("page_size_padded", self.page_size_padded, 1)

    @property
    def effective_head_size_v(self) -> int:
        """Width of one V head (elements); 0 for MLA."""
        assert self.head_size_v is not None
        return self.head_size_v

    @property
    def unpadded_page_size_bytes(self) -> int:
        """Bytes of K and V for ``block_size`` tokens, before any padding."""
        return (
            self.num_kv_heads
            * self.block_size
            * (self.head_size + self.effective_head_size_v)
            * get_dtype_size(self.dtype)
        )

    @property
    def real_page_size_bytes(self) -> int:
        """Alias of ``unpadded_page_size_bytes`` (as in vLLM)."""
        return self.unpadded_page_size_bytes

    @property
    def page_size_bytes(self) -> int:
        """Bytes one block occupies: the padded page if set, else the real one."""
        if self.page_size_padded is None:
            return self.unpadded_page_size_bytes
        if self.page_size_padded < self.unpadded_page_size_bytes:
            raise ValueError(
                f"page_size_padded ({self.page_size_padded} bytes) is smaller than the "
                f"page ({self.unpadded_page_size_bytes} bytes)"
            )
        return self.page_size_padded

    def _check_same_attention_fields(self, specs: list[AttentionSpec]) -> None:
        keys = ("block_size", "num_kv_heads", "head_size", "dtype", "head_size_v")
        for spec in specs:
            if any(getattr(spec, k) != getattr(self, k) for k in keys) or (
                spec.page_size_padded != self.page_size_padded
            ):
                raise KVCacheSpecMismatchError(
                    "all attention layers of one KV cache group must have the same attention spec"
                )


@dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(AttentionSpec):
    """Full (global) attention: a block for every token (mirrors ``FullAttentionSpec``).

    ``sliding_window`` / ``attention_chunk_size`` record a local-attention layer that is
    managed as full attention (hybrid manager disabled); they do not change sizing.
    """

    sliding_window: int | None = None
    attention_chunk_size: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sliding_window is not None:
            _require_int("sliding_window", self.sliding_window, 1)
        if self.attention_chunk_size is not None:
            _require_int("attention_chunk_size", self.attention_chunk_size, 1)

    def max_memory_usage_bytes(self, max_model_len: int, max_in_flight_tokens: int = 0) -> int:
        """Bytes one request of ``max_model_len`` tokens can hold in this layer."""
        del max_in_flight_tokens  # full attention keeps every token
        return cdiv(max_model_len, self.block_size) * self.page_size_bytes

    def uniform_type_key(self) -> object:
        return FullAttentionSpec

    @staticmethod
    def merge_window_sizes(window_sizes: set[int]) -> int | None:
        """The one window size of a group (tokens); ValueError if several."""
        if len(window_sizes) > 1:
            raise ValueError(
                "all attention layers in one KV cache group must have the same window size"
            )
        return next(iter(window_sizes), None)

    @classmethod
    def merge(cls, specs: list[FullAttentionSpec]) -> FullAttentionSpec:  # type: ignore[override]
        """Mirrors ``FullAttentionSpec.merge``: windows merge, other fields must match."""
        if not all(isinstance(s, FullAttentionSpec) for s in specs) or any(
            isinstance(s, MLAAttentionSpec) for s in specs
        ):
            raise KVCacheSpecMismatchError("a full attention group takes only non-MLA layers")
        first = specs[0]
        window = cls.merge_window_sizes({s.sliding_window for s in specs} - {None})
        chunk = cls.merge_window_sizes({s.attention_chunk_size for s in specs} - {None})
        first._check_same_attention_fields(list(specs))
        if window is not None and chunk is not None:
            raise KVCacheSpecMismatchError(
                "a model with both sliding window and chunked local layers is not supported"
            )
        return replace(first, sliding_window=window, attention_chunk_size=chunk)


@dataclass(frozen=True, kw_only=True)
class MLAAttentionSpec(FullAttentionSpec):
    """Multi-head latent attention (mirrors ``MLAAttentionSpec``): one latent vector of
    ``head_size`` per token, no separate V (``head_size_v = 0``)."""

    head_size_v: int | None = 0

    @classmethod
    def merge(cls, specs: list[MLAAttentionSpec]) -> MLAAttentionSpec:  # type: ignore[override]
        """All MLA layers with the same fields; window fields are dropped (as in vLLM)."""
        if not all(isinstance(s, MLAAttentionSpec) for s in specs):
            raise KVCacheSpecMismatchError("an MLA group takes only MLA layers")
        first = specs[0]
        merged = type(first)(
            block_size=first.block_size,
            num_kv_heads=first.num_kv_heads,
            head_size=first.head_size,
            dtype=first.dtype,
            page_size_padded=first.page_size_padded,
        )
        merged._check_same_attention_fields(list(specs))
        return merged


@dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec(AttentionSpec):
    """Sliding-window attention of ``sliding_window`` tokens (mirrors ``SlidingWindowSpec``).

    ``extra_retained_tokens`` trailing tokens below the window are kept alive too
    (multi-module speculative decoding).
    """

    sliding_window: int
    extra_retained_tokens: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        _require_int("sliding_window", self.sliding_window, 1)
        _require_int("extra_retained_tokens", self.extra_retained_tokens, 0)

    def max_admission_blocks_per_request(
        self, max_in_flight_tokens: int, max_model_len: int
    ) -> int:
        """Blocks one request can hold at most (admission check and pool sizing).

        The window minus one, the retained tokens and every in-flight token, capped at
        ``max_model_len``; plus one block because the window need not start on a block.
        """
        num_tokens = min(
            self.sliding_window - 1 + self.extra_retained_tokens + max_in_flight_tokens,
            max_model_len,
        )
        return cdiv(num_tokens, self.block_size) + 1

    def max_memory_usage_bytes(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        """Bytes one request can hold in this layer."""
        blocks = self.max_admission_blocks_per_request(max_in_flight_tokens, max_model_len)
        return blocks * self.page_size_bytes

    def uniform_type_key(self) -> object:
        return (SlidingWindowSpec, self.sliding_window)


@dataclass(frozen=True, kw_only=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    """Chunked local attention with chunks of ``attention_chunk_size`` tokens
    (mirrors ``ChunkedLocalAttentionSpec``)."""

    attention_chunk_size: int

    def __post_init__(self) -> None:
        super().__post_init__()
        _require_int("attention_chunk_size", self.attention_chunk_size, 1)

    def max_admission_blocks_per_request(
        self, max_in_flight_tokens: int, max_model_len: int
    ) -> int:
        """Blocks one request can hold at most: one chunk plus the in-flight tokens."""
        num_tokens = min(self.attention_chunk_size + max_in_flight_tokens, max_model_len)
        return cdiv(num_tokens, self.block_size)

    def max_memory_usage_bytes(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        """Bytes one request can hold in this layer."""
        blocks = self.max_admission_blocks_per_request(max_in_flight_tokens, max_model_len)
        return blocks * self.page_size_bytes

    def uniform_type_key(self) -> object:
        return (ChunkedLocalAttentionSpec, self.attention_chunk_size)


@dataclass(frozen=True, kw_only=True)
class UniformTypeKVCacheSpecs(KVCacheSpec):
    """Layers of one attention type (same token slots needed) but different page sizes,
    kept as one group (mirrors ``UniformTypeKVCacheSpecs``). A block spans every layer:
    ``page_size_bytes`` is the sum of the layers' pages."""

    kv_cache_specs: dict[str, KVCacheSpec]

    @property
    def first_spec(self) -> KVCacheSpec:
        return next(iter(self.kv_cache_specs.values()))

    @property
    def page_size_bytes(self) -> int:
        return sum(spec.page_size_bytes for spec in self.kv_cache_specs.values())

    def max_memory_usage_pages(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        """Blocks one request needs: the most any of the layers needs."""
        return max(
            cdiv(
                spec.max_memory_usage_bytes(max_model_len, max_in_flight_tokens),
                spec.page_size_bytes,
            )
            for spec in self.kv_cache_specs.values()
        )

    def max_memory_usage_bytes(self, max_model_len: int, max_in_flight_tokens: int = 0) -> int:
        """Bytes one request can hold across all the group's layers."""
        pages = self.max_memory_usage_pages(max_model_len, max_in_flight_tokens)
        return pages * self.page_size_bytes

    @classmethod
    def is_uniform_type(cls, kv_cache_specs: dict[str, KVCacheSpec]) -> bool:
        """Same block size and the same attention type (window) for every layer."""
        specs = list(kv_cache_specs.values())
        if len({spec.block_size for spec in specs}) > 1:
            return False
        return len({spec.uniform_type_key() for spec in specs}) == 1

    @classmethod
    def from_specs(cls, kv_cache_specs: dict[str, KVCacheSpec]) -> UniformTypeKVCacheSpecs | None:
        """The combined spec if the layers are of one type, else None."""
        if not kv_cache_specs or not cls.is_uniform_type(kv_cache_specs):
            return None
        block_size = next(iter(kv_cache_specs.values())).block_size
        return cls(block_size=block_size, kv_cache_specs=dict(kv_cache_specs))
