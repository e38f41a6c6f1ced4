"""The oracle's engine configuration: the config knobs and their defaults, the tiny
offline model (and its draft models), vLLM's NONE_HASH, the hand-made KV-cache
configuration and the ``VllmConfig`` a CPU-only scheduler is built from.

Part of the oracle driver (``vllm_driver.py``, whose docstring lists the knobs); the
siblings ``pd_driver.py`` and ``offload_driver.py`` build their engines from it too,
through ``oracle_pd.py`` and ``oracle_offload.py``.
Standard library and vLLM only.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import torch
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVEventsConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
)
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core import kv_cache_utils
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)

STEPS_DEFAULTS: dict[str, Any] = {
    "block_size": 16,
    "num_gpu_blocks": None,
    "enable_prefix_caching": True,
    "prefix_caching_hash_algo": "sha256",
    "max_num_seqs": 128,
    "max_num_batched_tokens": 2048,
    "max_num_scheduled_tokens": None,
    "enable_chunked_prefill": True,
    "long_prefill_token_threshold": 0,
    "policy": "fcfs",
    "watermark": 0.0,
    "scheduler_reserve_full_isl": True,
    "max_model_len": None,
    "use_v2_model_runner": True,
    "kv_groups": ["full"],
    "sliding_window": None,
    "attention_chunk_size": None,
    "sample_token_id": 7,
    "enable_kv_cache_events": False,
    "dump_block_tables": False,
    "num_speculative_tokens": 0,
    "speculative_method": "ngram",
    "none_hash_seed": kv_cache_utils.DEFAULT_NONE_HASH_SEED,
    "async_scheduling": False,
}

OPS_DEFAULTS: dict[str, Any] = {
    "num_gpu_blocks": None,
    "block_size": 16,
    "enable_caching": True,
    "hash_algo": "sha256",
    "kv_groups": ["full"],
    "sliding_window": None,
    "attention_chunk_size": None,
    "enable_kv_cache_events": False,
    "max_model_len": 8192,
    "watermark": 0.0,
    "none_hash_seed": kv_cache_utils.DEFAULT_NONE_HASH_SEED,
}

# Accepted spellings of a KV group kind -> (canonical kind, name in ops headers).
GROUP_KINDS = {
    "full": ("full", "full"),
    "sliding_window": ("sliding_window", "sliding"),
    "sliding": ("sliding_window", "sliding"),
    "swa": ("sliding_window", "sliding"),
    "chunked_local": ("chunked_local", "chunked_local"),
    "chunked": ("chunked_local", "chunked_local"),
}

_TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 1 << 22,
    "torch_dtype": "float32",
}
_MODEL_DIR: str | None = None


def merged(defaults: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """Return the defaults overridden by the config; unknown keys are an error."""
    unknown = sorted(set(config) - set(defaults))
    if unknown:
        raise ValueError(f"unknown config keys: {unknown}")
    out = dict(defaults)
    out.update(config)
    return out


def _temporary_dir(prefix: str) -> str:
    """A new temporary directory that is removed when the process exits (the oracle
    runs once per conformance run: each left one behind before)."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def model_dir() -> str:
    """Return a temporary directory holding a tiny Llama config.json (made once,
    removed at exit)."""
    global _MODEL_DIR
    if _MODEL_DIR is None:
        _MODEL_DIR = _temporary_dir("kvsim-oracle-model-")
        with open(os.path.join(_MODEL_DIR, "config.json"), "w") as f:
            json.dump(_TINY_LLAMA, f)
    return _MODEL_DIR


_DRAFT_DIRS: dict[str, str] = {}
_DRAFT_ARCHITECTURES = {"eagle": "LlamaForCausalLM", "eagle3": "LlamaForCausalLMEagle3"}


def draft_model_dir(method: str) -> str:
    """The draft model of a speculative ``method``: the tiny Llama itself, or a
    one-layer EAGLE / EAGLE-3 head on it (made once, removed at exit)."""
    if method not in _DRAFT_ARCHITECTURES:
        return model_dir()
    if method not in _DRAFT_DIRS:
        path = _temporary_dir(f"kvsim-oracle-{method}-")
        config = dict(_TINY_LLAMA, architectures=[_DRAFT_ARCHITECTURES[method]])
        config["num_hidden_layers"] = 1
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(config, f)
        _DRAFT_DIRS[method] = path
    return _DRAFT_DIRS[method]


def init_none_hash(algo: str, seed: str) -> tuple[Callable[[Any], bytes], bytes]:
    """Initialise vLLM's global NONE_HASH from a fixed seed; return (hash_fn, hash)."""
    hash_fn = get_hash_fn_by_name(algo)
    saved = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = seed
    try:
        kv_cache_utils.init_none_hash(hash_fn)
    finally:
        if saved is None:
            del os.environ["PYTHONHASHSEED"]
        else:
            os.environ["PYTHONHASHSEED"] = saved
    return hash_fn, bytes(kv_cache_utils.NONE_HASH)


def tiny_spec(kind: str, cfg: dict[str, Any]) -> Any:
    """A one-head, head-size-1 KV spec of the given kind (only block counts matter)."""
    common = {
        "block_size": cfg["block_size"],
        "num_kv_heads": 1,
        "head_size": 1,
        "dtype": torch.float32,
    }
    canonical = GROUP_KINDS[kind][0]
    if canonical == "sliding_window":
        return SlidingWindowSpec(**common, sliding_window=int(cfg["sliding_window"]))
    if canonical == "chunked_local":
        return ChunkedLocalAttentionSpec(
            **common, attention_chunk_size=int(cfg["attention_chunk_size"])
        )
    return FullAttentionSpec(**common)


def kv_cache_config_for(cfg: dict[str, Any]) -> KVCacheConfig:
    """Hand-made KVCacheConfig: one group per entry of kv_groups, one pool."""
    groups = [
        KVCacheGroupSpec([f"layer{i}"], tiny_spec(kind, cfg))
        for i, kind in enumerate(cfg["kv_groups"])
    ]
    return KVCacheConfig(
        num_blocks=int(cfg["num_gpu_blocks"]), kv_cache_tensors=[], kv_cache_groups=groups
    )


def resolve_max_model_len(cfg: dict[str, Any], trace: list[dict[str, Any]]) -> int:
    """max_model_len from the config, or the longest prompt + max_tokens."""
    if cfg["max_model_len"] is not None:
        return int(cfg["max_model_len"])
    return max(len(r["prompt_token_ids"]) + int(r["max_tokens"]) for r in trace)


def scheduler_kwargs(cfg: dict[str, Any], max_model_len: int) -> dict[str, Any]:
    """The ``SchedulerConfig`` arguments of the knobs."""
    kwargs: dict[str, Any] = {
        "max_num_seqs": int(cfg["max_num_seqs"]),
        "max_num_batched_tokens": int(cfg["max_num_batched_tokens"]),
        "max_model_len": max_model_len,
        "enable_chunked_prefill": bool(cfg["enable_chunked_prefill"]),
        "long_prefill_token_threshold": int(cfg["long_prefill_token_threshold"]),
        "policy": cfg["policy"],
        "watermark": float(cfg["watermark"]),
        "scheduler_reserve_full_isl": bool(cfg["scheduler_reserve_full_isl"]),
        "async_scheduling": bool(cfg["async_scheduling"]),
        "is_encoder_decoder": False,
    }
    if cfg["max_num_scheduled_tokens"] is not None:
        kwargs["max_num_scheduled_tokens"] = int(cfg["max_num_scheduled_tokens"])
    return kwargs


def speculative_config_for(cfg: dict[str, Any], model: ModelConfig) -> SpeculativeConfig | None:
    """The ``SpeculativeConfig`` of the knobs on the target ``model`` (None: no
    speculative decoding)."""
    k = int(cfg["num_speculative_tokens"] or 0)
    if k:
        method = cfg["speculative_method"]
        return SpeculativeConfig(
            method=method,
            num_speculative_tokens=k,
            model=None if method.startswith("ngram") else draft_model_dir(method),
            target_model_config=model,
            target_parallel_config=ParallelConfig(),
        )
    return None


def tiny_model_config(max_model_len: int) -> ModelConfig:
    """The ModelConfig of the tiny offline model directory (:func:`model_dir`)."""
    path = model_dir()
    return ModelConfig(
        model=path,
        tokenizer=path,
        skip_tokenizer_init=True,
        dtype="float32",
        seed=0,
        max_model_len=max_model_len,
    )


def build_vllm_config(
    cfg: dict[str, Any], max_model_len: int, kv_transfer_config: Any = None
) -> VllmConfig:
    """VllmConfig for a CPU-only scheduler over a tiny offline model directory
    (``kv_transfer_config``: a KV connector, for ``pd_driver.py``)."""
    model = tiny_model_config(max_model_len)
    sched_kwargs = scheduler_kwargs(cfg, max_model_len)
    cache = CacheConfig(
        block_size=int(cfg["block_size"]),
        enable_prefix_caching=bool(cfg["enable_prefix_caching"]),
        prefix_caching_hash_algo=cfg["prefix_caching_hash_algo"],
    )
    cache.num_gpu_blocks = int(cfg["num_gpu_blocks"])
    events = None
    if cfg["enable_kv_cache_events"]:
        events = KVEventsConfig(enable_kv_cache_events=True, publisher="null")
    speculative = speculative_config_for(cfg, model)
    return VllmConfig(
        model_config=model,
        scheduler_config=SchedulerConfig(**sched_kwargs),
        cache_config=cache,
        device_config=DeviceConfig(device="cpu"),
        kv_events_config=events,
        speculative_config=speculative,
        kv_transfer_config=kv_transfer_config,
    )
