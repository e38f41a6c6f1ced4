"""The engine arguments of the KV block budget (``calibrate.budget``), checked, and the
batch limits vLLM 0.33.0 picks when they are left out.

Every check raises :class:`KVBudgetError` (a ValueError) naming the knob.
"""

from __future__ import annotations

from calibrate.gpu_spec import GIB, GPUSpec
from calibrate.model_spec import ModelSpec

KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")


class KVBudgetError(ValueError):
    """The configuration leaves no room for the KV cache (message names the knob)."""


def default_batch_limits(gpu: GPUSpec) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM 0.33.0 picks for the OpenAI server:
    16384/1024 on GPUs with >= 160 GiB, 8192/1024 on >= 70 GiB unless an A100, else
    2048/256 (``EngineArgs`` batch defaults, shared/notes/calibration.md §3.8)."""
    gib = gpu.memory_bytes / GIB
    if gib >= 160:
        return 16384, 1024
    if gib >= 70 and "a100" not in gpu.name.lower():
        return 8192, 1024
    return 2048, 256


def check_args(model: ModelSpec, tp: int, util: float, block_size: int, dtype: str) -> None:
    """Check the tensor-parallel size, ``gpu_memory_utilization``, ``block_size``
    (tokens) and ``kv_cache_dtype`` against each other and the model's KV heads."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise KVBudgetError(f"tensor_parallel_size must be an integer >= 1, got {tp!r}")
    if not (isinstance(util, (int, float)) and 0 < util <= 1):
        raise KVBudgetError(f"gpu_memory_utilization must be in (0, 1], got {util!r}")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise KVBudgetError(f"block_size must be a positive integer (tokens), got {block_size!r}")
    if dtype not in KV_CACHE_DTYPES:
        raise KVBudgetError(
            f"kv_cache_dtype: unknown {dtype!r}; allowed: {', '.join(KV_CACHE_DTYPES)}"
        )
    if "mla" not in model.layer_kinds and model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise KVBudgetError(
            f"tensor_parallel_size {tp} must divide or be a multiple of the model's "
            f"{model.num_kv_heads} KV heads"
        )


def positive(name: str, value: object) -> int:
    """``value`` when it is a positive integer, else KVBudgetError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise KVBudgetError(f"{name} must be a positive integer, got {value!r}")
    return value


def batch_limits(
    model: ModelSpec,
    gpu: GPUSpec,
    max_model_len: int | None,
    max_num_batched_tokens: int | None,
    max_num_seqs: int | None,
) -> tuple[int, int, int]:
    """(max_num_batched_tokens, max_num_seqs, max_model_len) with vLLM's defaults for
    the ones left out (None): :func:`default_batch_limits` and the model's
    ``max_position_embeddings``. KVBudgetError when one is not a positive integer, the
    length exceeds the model's, or the batch holds fewer tokens than sequences."""
    default_mbt, default_seqs = default_batch_limits(gpu)
    mbt = positive("max_num_batched_tokens", max_num_batched_tokens or default_mbt)
    seqs = positive("max_num_seqs", max_num_seqs or default_seqs)
    max_len = positive("max_model_len", max_model_len or model.max_position_embeddings)
    if max_len > model.max_position_embeddings:
        raise KVBudgetError(
            f"max_model_len {max_len} exceeds the model's max_position_embeddings "
            f"({model.max_position_embeddings})"
        )
    if mbt < seqs:
        mbt_from = "" if max_num_batched_tokens else f", vLLM's default on {gpu.name}"
        seqs_from = "" if max_num_seqs else f", vLLM's default on {gpu.name}"
        raise KVBudgetError(
            f"max_num_batched_tokens ({mbt}{mbt_from}) must be >= max_num_seqs "
            f"({seqs}{seqs_from}): set max_num_seqs or max_num_batched_tokens"
        )
    return mbt, seqs, max_len
