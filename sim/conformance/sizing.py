"""Sizing conformance: random layer mixes planned by vLLM (driver ``sizing`` mode) and
by :mod:`kvcore.kv_cache_planning`.

The case shape follows ``tests/conformance/sizing_oracle.py`` (random full / sliding /
chunked-local / MLA layer mixes, heads, head sizes, dtypes, memory, one or two
tensor-parallel workers, hybrid manager on or off), restricted to what the driver's
sizing mode describes: one block size per model and the driver's scheduler defaults
(``max_num_batched_tokens`` 2048, so 2048 tokens in flight).
"""

from __future__ import annotations

import logging
from typing import Any

from kvcore import kv_cache_interface as ki
from kvcore.kv_cache_planning import get_kv_cache_configs
from sim.conformance.generate import case_rng

IN_FLIGHT_TOKENS = 2048  # the driver's max_num_batched_tokens (synchronous scheduling)
GiB = 1 << 30
_CLASSES = {
    "full": ki.FullAttentionSpec,
    "sliding_window": ki.SlidingWindowSpec,
    "chunked_local": ki.ChunkedLocalAttentionSpec,
    "mla": ki.MLAAttentionSpec,
}


def random_sizing_case(seed: int, index: int) -> dict[str, Any]:
    """A driver sizing config: layer groups, block size, memory, workers, hybrid flag."""
    rng = case_rng(seed, index, stream=2)
    dtype = str(rng.choice(["bfloat16", "float16", "float32", "fp8"]))
    heads = int(rng.choice([1, 2, 4, 8]))
    head_size = int(rng.choice([64, 80, 128, 256]))
    window = int(rng.choice([128, 512, 1024, 4096]))
    chunk = int(rng.choice([2048, 8192]))
    layers: list[dict[str, Any]] = []
    for kind in ("full", "sliding_window", "chunked_local", "mla"):
        count = int(rng.choice([0, 0, 1, 2, 4, 8, 20]))
        if count == 0 or (kind == "mla" and (layers or rng.random() < 0.5)):
            continue
        layer: dict[str, Any] = {
            "kind": kind,
            "count": count,
            "dtype": dtype,
            "num_kv_heads": heads,
            "head_size": head_size,
        }
        if kind == "mla":
            layer.update(num_kv_heads=1, head_size=int(rng.choice([576, 320])))
        if kind == "sliding_window":
            layer["sliding_window"] = window
        if kind == "chunked_local":
            layer["attention_chunk_size"] = chunk
        layers.append(layer)
    if not layers:
        layers.append(
            {
                "kind": "full",
                "count": 4,
                "dtype": dtype,
                "num_kv_heads": heads,
                "head_size": head_size,
            }
        )
    order = rng.permutation(len(layers))
    workers = int(rng.choice([1, 1, 2]))
    memory = [
        int(float(rng.choice([0.01, 0.25, 1, 4, 40])) * GiB) + int(rng.integers(0, 1 << 20))
        for _ in range(workers)
    ]
    return {
        "layers": [layers[int(i)] for i in order],
        "block_size": int(rng.choice([16, 16, 32, 64])),
        "available_bytes": memory,
        "num_workers": workers,
        "max_model_len": int(rng.choice([2048, 8192, 32768])),
        "hybrid_kv_cache_manager": bool(rng.random() < 0.8),
    }


def kvcore_layer_specs(config: dict[str, Any]) -> dict[str, ki.KVCacheSpec]:
    """Layer name -> kvcore spec, numbered in list order as the driver does."""
    specs: dict[str, ki.KVCacheSpec] = {}
    block_size = int(config.get("block_size", 16))
    for layer in config["layers"]:
        kwargs = {k: v for k, v in layer.items() if k not in ("kind", "count")}
        kwargs.setdefault("num_kv_heads", 1)
        for _ in range(int(layer.get("count", 1))):
            cls = _CLASSES[layer.get("kind", "full")]
            specs[f"model.layers.{len(specs)}.attn"] = cls(block_size=block_size, **kwargs)
    return specs


def run_kvcore_sizing(config: dict[str, Any]) -> dict[str, Any] | None:
    """kvcore's plan in the driver's sizing format; ``None`` when kvcore refuses it."""
    avail = config["available_bytes"]
    workers = int(config.get("num_workers", 1))
    memory = [int(a) for a in avail] if isinstance(avail, list) else [int(avail)] * workers
    specs = kvcore_layer_specs(config)
    quiet = logging.getLogger("kvcore")  # planning warnings are expected here
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        cfg = get_kv_cache_configs(
            [specs for _ in memory],
            memory,
            int(config.get("max_model_len", 4096)),
            IN_FLIGHT_TOKENS,
            disable_hybrid_kv_cache_manager=not config.get("hybrid_kv_cache_manager", True),
        )[0]
    except ValueError:
        return None
    finally:
        quiet.setLevel(level)
    return {
        "num_blocks": cfg.num_blocks,
        "groups": [
            {
                "spec": type(g.kv_cache_spec).__name__,
                "num_layers": len(g.layer_names),
                "block_size": g.kv_cache_spec.block_size,
                "page_size_bytes": g.kv_cache_spec.page_size_bytes,
                "sliding_window": getattr(g.kv_cache_spec, "sliding_window", None),
            }
            for g in cfg.kv_cache_groups
        ],
        "kv_cache_tensors": [
            {"size": t.size, "num_layers": len(t.layers)} for t in cfg.kv_cache_tensors
        ],
    }
