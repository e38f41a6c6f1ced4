"""A CPU-offload conformance case's knobs and their defaults, one list for both
replays: kvcore's (:mod:`sim.conformance.offload`) and vLLM's (``offload_driver.py``,
which loads this file by path in the oracle environment: standard library only).
"""

from __future__ import annotations

from typing import Any

DEFAULTS: dict[str, Any] = {
    "block_size": 16,
    "num_gpu_blocks": None,
    "max_num_seqs": 8,
    "max_num_batched_tokens": 256,
    "enable_chunked_prefill": True,
    "long_prefill_token_threshold": 0,
    "policy": "fcfs",
    "watermark": 0.0,
    "scheduler_reserve_full_isl": True,
    "max_model_len": None,
    "kv_groups": ["full"],
    "sample_token_id": 7,
    "prefix_caching_hash_algo": "sha256",
    "none_hash_seed": "vllm-none-hash",
    "cpu_chunks": 16,
    "blocks_per_chunk": 1,
    "offload_prompt_only": True,
    "load_latency": 1,
    "store_latency": 1,
    "async_scheduling": False,
}
