"""Engine configuration: vLLM's engine-argument names and defaults (vLLM 0.33.0).

Loaded from ``--engine FILE`` (YAML) and command-line flags; validated strictly.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class EngineConfig(BaseModel):
    """One replica's engine settings. ``None`` means vLLM's default for the GPU/model.

    ``latency_model`` / ``constant_step_s`` are kvsim's own: which step-time model to
    use (``roofline`` from the catalog, or ``constant`` seconds per step).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    block_size: int = Field(16, gt=0)
    gpu_memory_utilization: float = Field(0.92, gt=0.0, le=1.0)
    num_gpu_blocks_override: int | None = Field(None, gt=1)
    max_num_seqs: int | None = Field(None, gt=0)
    max_num_batched_tokens: int | None = Field(None, gt=0)
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    prefix_caching_hash_algo: Literal["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"] = "sha256"
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    max_model_len: int | None = Field(None, gt=1)
    tensor_parallel_size: int = Field(1, gt=0)
    long_prefill_token_threshold: int = Field(0, ge=0)
    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    latency_model: Literal["roofline", "constant"] = "roofline"
    constant_step_s: float = Field(0.01, gt=0.0)
