"""The oracle's ``sizing`` mode: vLLM's own KV-cache sizing (number of blocks, groups,
tensors) for a layer list and an amount of memory per worker (the knobs are in
``vllm_driver.py``'s docstring).

Part of the oracle driver; standard library and vLLM only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import vllm
from oracle_load import load_by_path
from vllm.v1.core import kv_cache_planning
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheGroupSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)

oracle_config = load_by_path("oracle_config.py")


DTYPES = {
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "float32": torch.float32,
    "fp32": torch.float32,
    "fp8": torch.float8_e4m3fn,
    "float8_e4m3fn": torch.float8_e4m3fn,
}


def layer_spec(layer: dict[str, Any], block_size: int) -> Any:
    """A real-sized KV spec for one layer description."""
    kind = layer.get("kind", "full")
    common = {
        "block_size": block_size,
        "num_kv_heads": int(layer.get("num_kv_heads", 1)),
        "head_size": int(layer["head_size"]),
        "dtype": DTYPES[layer.get("dtype", "bfloat16")],
    }
    if kind == "mla":
        return MLAAttentionSpec(**common)
    canonical = oracle_config.GROUP_KINDS[kind][0]
    if canonical == "sliding_window":
        return SlidingWindowSpec(**common, sliding_window=int(layer["sliding_window"]))
    if canonical == "chunked_local":
        return ChunkedLocalAttentionSpec(
            **common, attention_chunk_size=int(layer["attention_chunk_size"])
        )
    return FullAttentionSpec(**common)


def sizing_layers(cfg: dict[str, Any]) -> dict[str, Any]:
    """Layer name -> spec, with layers numbered in the order given."""
    specs: dict[str, Any] = {}
    block_size = int(cfg.get("block_size", 16))
    for layer in cfg["layers"]:
        for _ in range(int(layer.get("count", 1))):
            specs[f"model.layers.{len(specs)}.attn"] = layer_spec(layer, block_size)
    return specs


def run_sizing(config: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """vLLM's num_blocks and group structure for a layer list and memory budget."""
    workers = int(config.get("num_workers", 1))
    avail = config["available_bytes"]
    memory = [int(a) for a in avail] if isinstance(avail, list) else [int(avail)] * workers
    steps_cfg = dict(oracle_config.STEPS_DEFAULTS)
    steps_cfg.update(block_size=int(config.get("block_size", 16)), num_gpu_blocks=1)
    vllm_config = oracle_config.build_vllm_config(steps_cfg, int(config.get("max_model_len", 4096)))
    # A GPU engine resolves these at start-up; a CPU-only build would disable HMA.
    hybrid = bool(config.get("hybrid_kv_cache_manager", True))
    vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = not hybrid
    vllm_config.cache_config.kv_cache_layout = config.get("kv_cache_layout", "LBNHC")
    register_all_kvcache_specs(vllm_config)
    specs = [sizing_layers(config) for _ in memory]
    groups = kv_cache_planning.get_global_kv_cache_groups(vllm_config, specs)
    kv_cfg = kv_cache_planning.get_kv_cache_configs(vllm_config, specs, memory, groups)[0]
    yield {
        "vllm_version": vllm.__version__,
        "available_bytes": memory[0] if len(set(memory)) == 1 else memory,
        "kv_cache_layout": kv_cfg.kv_cache_layout or vllm_config.cache_config.kv_cache_layout,
        "hybrid_kv_cache_manager": not vllm_config.scheduler_config.disable_hybrid_kv_cache_manager,
        "num_blocks": kv_cfg.num_blocks,
        "groups": [group_json(g) for g in kv_cfg.kv_cache_groups],
        "kv_cache_tensors": [
            {"size": t.size, "num_layers": len(t.layers)} for t in kv_cfg.kv_cache_tensors
        ],
    }


def group_json(group: KVCacheGroupSpec) -> dict[str, Any]:
    """One KV-cache group of a sizing result."""
    spec = group.kv_cache_spec
    return {
        "spec": type(spec).__name__,
        "num_layers": len(group.layer_names),
        "block_size": spec.block_size,
        "page_size_bytes": spec.page_size_bytes,
        "sliding_window": getattr(spec, "sliding_window", None),
    }
