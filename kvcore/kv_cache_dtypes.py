"""KV cache element types as strings (vLLM's ``--kv-cache-dtype`` / model dtype names).

Mirrors the byte sizes of ``vllm.utils.torch_utils.STR_DTYPE_TO_TORCH_DTYPE`` (vLLM 0.33.0)
for the dtypes whose page is plain ``elements * bytes``: every fp8 variant is one byte.
Per-token-head quantized and packed fp4 formats carry extra scale bytes and are not
modelled.
"""

from __future__ import annotations

# Bytes per element, keyed by vLLM's ``--kv-cache-dtype`` / model dtype strings.
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
            f"dtype: unknown KV cache dtype {dtype!r}; allowed: {', '.join(sorted(DTYPE_SIZES))}"
        ) from None
