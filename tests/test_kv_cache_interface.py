"""Per-layer KV cache specs: page sizes, admission caps, merge rules, validation."""

from __future__ import annotations

import pytest

from kvcore.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheSpecMismatchError,
    MLAAttentionSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
    get_dtype_size,
)


def full(**kw) -> FullAttentionSpec:
    return FullAttentionSpec(**{"block_size": 16, "num_kv_heads": 8, "head_size": 128, **kw})


def test_llama2_13b_fp16_page():
    spec = FullAttentionSpec(block_size=16, num_kv_heads=40, head_size=128, dtype="float16")
    assert spec.page_size_bytes == 327_680  # 40 heads * 16 tokens * (128 K + 128 V) * 2 bytes
    assert 40 * spec.page_size_bytes == 13_107_200


def test_page_scales_with_block_size_and_heads():
    assert full().page_size_bytes == 65_536
    assert full(block_size=32).page_size_bytes == 131_072
    assert full(num_kv_heads=4).page_size_bytes == 32_768
    assert full(dtype="float32").page_size_bytes == 131_072


@pytest.mark.parametrize("fp8", ["fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"])
def test_fp8_halves_the_page(fp8):
    assert full(dtype=fp8).page_size_bytes * 2 == full(dtype="bfloat16").page_size_bytes


def test_head_size_v_defaults_to_head_size_and_can_differ():
    assert full().head_size_v == 128
    assert full(head_size_v=128) == full()
    assert full(head_size=192, head_size_v=128).page_size_bytes == 8 * 16 * 320 * 2


def test_mla_page_has_no_v():
    spec = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576, dtype="bfloat16")
    assert spec.head_size_v == 0
    assert spec.page_size_bytes == 16 * 576 * 2 == 18_432
    assert MLAAttentionSpec(block_size=64, head_size=576, dtype="fp8").page_size_bytes == 36_864


def test_padded_page():
    spec = full(page_size_padded=100_000)
    assert spec.real_page_size_bytes == 65_536
    assert spec.page_size_bytes == 100_000
    with pytest.raises(ValueError, match="page_size_padded"):
        _ = full(page_size_padded=1000).page_size_bytes


def test_full_attention_memory_per_request():
    assert full().max_memory_usage_bytes(8192) == 512 * 65_536
    assert full().max_memory_usage_bytes(8193, 2048) == 513 * 65_536


def test_sliding_window_admission_cap():
    swa = SlidingWindowSpec(block_size=16, sliding_window=1024)
    # window - 1 + in-flight tokens = 3071 tokens -> 192 blocks, +1 for the unaligned start
    assert swa.max_admission_blocks_per_request(2048, 8192) == 193
    assert swa.max_admission_blocks_per_request(2048, 1000) == 63 + 1  # capped by model len
    assert swa.max_admission_blocks_per_request(0, 8192) == 64 + 1
    retained = SlidingWindowSpec(block_size=16, sliding_window=1024, extra_retained_tokens=16)
    assert retained.max_admission_blocks_per_request(2048, 8192) == 194
    assert swa.max_memory_usage_bytes(8192, 2048) == 193 * swa.page_size_bytes


def test_chunked_local_admission_cap():
    chunked = ChunkedLocalAttentionSpec(block_size=16, attention_chunk_size=8192)
    assert chunked.max_admission_blocks_per_request(2048, 131072) == 640  # (8192+2048)/16
    assert chunked.max_admission_blocks_per_request(2048, 4096) == 256
    assert chunked.max_memory_usage_bytes(4096, 2048) == 256 * chunked.page_size_bytes


def test_copy_with_new_block_size_keeps_the_rest():
    swa = SlidingWindowSpec(block_size=16, num_kv_heads=4, sliding_window=512, dtype="fp8")
    bigger = swa.copy_with_new_block_size(64)
    assert (bigger.block_size, bigger.sliding_window, bigger.dtype) == (64, 512, "fp8")
    assert bigger.page_size_bytes == 4 * swa.page_size_bytes


def test_full_merge_takes_the_window():
    merged = FullAttentionSpec.merge([full(), full(sliding_window=128), full()])
    assert merged.sliding_window == 128
    assert merged.page_size_bytes == 65_536
    with pytest.raises(ValueError, match="window size"):
        FullAttentionSpec.merge([full(sliding_window=128), full(sliding_window=256)])
    with pytest.raises(KVCacheSpecMismatchError):
        FullAttentionSpec.merge([full(), full(num_kv_heads=4)])
    with pytest.raises(KVCacheSpecMismatchError):
        FullAttentionSpec.merge([full(sliding_window=128), full(attention_chunk_size=256)])


def test_mla_and_local_merges():
    mla = MLAAttentionSpec(block_size=16, head_size=576)
    assert MLAAttentionSpec.merge([mla, mla]) == mla
    with pytest.raises(KVCacheSpecMismatchError):
        FullAttentionSpec.merge([full(), mla])
    with pytest.raises(KVCacheSpecMismatchError):
        MLAAttentionSpec.merge([mla, full()])
    swa = SlidingWindowSpec(block_size=16, sliding_window=64)
    assert SlidingWindowSpec.merge([swa, swa]) == swa
    with pytest.raises(KVCacheSpecMismatchError):
        SlidingWindowSpec.merge([swa, SlidingWindowSpec(block_size=16, sliding_window=32)])


def test_uniform_type_specs():
    layers = {"a": full(), "b": full(num_kv_heads=2), "c": MLAAttentionSpec(block_size=16)}
    uniform = UniformTypeKVCacheSpecs.from_specs(layers)
    assert uniform is not None
    assert uniform.page_size_bytes == 65_536 + 16_384 + 16 * 2
    assert uniform.max_memory_usage_pages(1000, 0) == 63
    assert uniform.max_memory_usage_bytes(1000) == 63 * uniform.page_size_bytes
    swa = {"a": SlidingWindowSpec(block_size=16, sliding_window=64)}
    assert UniformTypeKVCacheSpecs.from_specs({**layers, **swa}) is None
    assert UniformTypeKVCacheSpecs.from_specs({"x": full(), "y": full(block_size=32)}) is None
    two_windows = {
        "a": SlidingWindowSpec(block_size=16, sliding_window=64, num_kv_heads=2),
        "b": SlidingWindowSpec(block_size=16, sliding_window=128),
    }
    assert not UniformTypeKVCacheSpecs.is_uniform_type(two_windows)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"block_size": 0}, "block_size"),
        ({"block_size": -16}, "block_size"),
        ({"num_kv_heads": 0}, "num_kv_heads"),
        ({"head_size": 0}, "head_size"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"attention_chunk_size": -1}, "attention_chunk_size"),
        ({"page_size_padded": 0}, "page_size_padded"),
    ],
)
def test_bad_fields_raise_value_error_naming_them(kwargs, field):
    with pytest.raises(ValueError, match=field):
        full(**kwargs)


def test_unknown_dtype_lists_allowed_values():
    with pytest.raises(ValueError, match=r"dtype.*'int4'.*bfloat16.*fp8"):
        full(dtype="int4")
    with pytest.raises(ValueError, match="sliding_window"):
        SlidingWindowSpec(block_size=16, sliding_window=0)
    assert get_dtype_size("half") == 2
