"""Differential check of kvcore's KV cache sizing against vLLM 0.33.0's own planner.

Run with the vLLM environment (vLLM's core runs on a CPU, no model weights needed):

    .venv-vllm/bin/python tests/conformance/sizing_oracle.py [--cases 50] [--seed 0]
        [--dump results.json]

Each case is a random layer mix (full / sliding-window / chunked-local / MLA layers with
random heads, head sizes, dtypes, block sizes), memory amount, override and 1-2 workers
(tensor-parallel copies or a pipeline split). Both vLLM (``get_global_kv_cache_groups`` +
``get_kv_cache_configs``) and kvcore plan it; num_blocks, group structure, tensors, max
concurrency and errors are compared. ``--dump`` writes the cases with vLLM's answers so
that a test can later replay them against kvcore without vLLM. Not a pytest module.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

KINDS = ("full", "sliding_window", "chunked_local", "mla")
GiB = 1 << 30


def make_cases(num_cases: int, seed: int) -> list[dict[str, Any]]:
    """Random planning cases as plain JSON-able dicts."""
    rng = random.Random(seed)
    cases = []
    for index in range(num_cases):
        dtype = rng.choice(["bfloat16", "float16", "fp8", "float32", "fp8_e5m2"])
        block_size = rng.choice([16, 16, 32, 64])
        layers: list[dict[str, Any]] = []
        for kind in KINDS:
            count = rng.choice([0, 0, 1, 2, 4, 6, 8, 12, 20, 30])
            if kind == "mla" and rng.random() < 0.5:
                count = 0
            heads = rng.choice([1, 2, 4, 8])
            head_size = rng.choice([64, 80, 128, 256])
            for _ in range(count):
                layer: dict[str, Any] = {"kind": kind, "block_size": block_size, "dtype": dtype}
                if kind == "mla":
                    layer.update(num_kv_heads=1, head_size=rng.choice([576, 576, 320]))
                else:
                    layer.update(num_kv_heads=heads, head_size=head_size)
                if kind == "sliding_window":
                    layer["sliding_window"] = rng.choice([128, 512, 1024, 4096])
                if kind == "chunked_local":
                    layer["attention_chunk_size"] = rng.choice([2048, 8192])
                layers.append(layer)
        if not layers:
            layers.append(
                {
                    "kind": "full",
                    "block_size": block_size,
                    "dtype": dtype,
                    "num_kv_heads": 8,
                    "head_size": 128,
                }
            )
        # Uniform windows per kind inside one model (as real models have).
        for key in ("sliding_window", "attention_chunk_size"):
            first = next((la[key] for la in layers if key in la), None)
            for la in layers:
                if key in la:
                    la[key] = first
        rng.shuffle(layers)
        names = [f"model.layers.{i}.{la['kind']}" for i in range(len(layers))]
        num_workers = rng.choice([1, 1, 2])
        pipeline = num_workers == 2 and rng.random() < 0.6
        if pipeline:
            cut = max(1, len(layers) // 2)
            workers = [names[:cut], names[cut:]] if len(layers) > 1 else [names, names]
        else:
            workers = [names] * num_workers
        memory = [
            int(rng.choice([0.25, 1, 4, 10, 40, 70]) * GiB) + rng.randrange(0, 1 << 20)
            for _ in workers
        ]
        cases.append(
            {
                "index": index,
                "layers": dict(zip(names, layers, strict=True)),
                "workers": workers,
                "available_memory": memory,
                "max_model_len": rng.choice([2048, 8192, 32768, 131072]),
                "max_num_batched_tokens": rng.choice([512, 2048, 8192]),
                "num_gpu_blocks_override": rng.choice([None] * 6 + [100, 4096]),
                "disable_hybrid_kv_cache_manager": rng.random() < 0.2,
            }
        )
    return cases


def _error_kind(exc: BaseException) -> str:
    for kind in (NotImplementedError, ValueError, AssertionError):
        if isinstance(exc, kind):
            return kind.__name__
    return type(exc).__name__


def _summarize(configs: list[Any], concurrency: float, spec_name: Any) -> dict[str, Any]:
    out = []
    for config in configs:
        groups = []
        for group in config.kv_cache_groups:
            spec = group.kv_cache_spec
            groups.append(
                {
                    "spec": spec_name(spec),
                    "layers": list(group.layer_names),
                    "block_size": spec.block_size,
                    "page_size_bytes": spec.page_size_bytes,
                    "sliding_window": getattr(spec, "sliding_window", None),
                    "attention_chunk_size": getattr(spec, "attention_chunk_size", None),
                }
            )
        tensors = [
            [t.size, list(t.layers), t.layer_stride, t.block_stride, t.offset]
            for t in config.kv_cache_tensors
        ]
        out.append({"num_blocks": config.num_blocks, "groups": groups, "tensors": tensors})
    return {"workers": out, "max_concurrency": round(concurrency, 9)}


def run_kvcore(case: dict[str, Any]) -> dict[str, Any]:
    """Plan ``case`` with kvcore; the summary (or error kind) to compare."""
    from kvcore import kv_cache_interface as ki
    from kvcore.kv_cache_budget import get_max_concurrency_for_kv_cache_config
    from kvcore.kv_cache_planning import InsufficientKVCacheMemoryError, get_kv_cache_configs

    classes = {
        "full": ki.FullAttentionSpec,
        "sliding_window": ki.SlidingWindowSpec,
        "chunked_local": ki.ChunkedLocalAttentionSpec,
        "mla": ki.MLAAttentionSpec,
    }
    specs = {}
    for name, layer in case["layers"].items():
        kwargs = {k: v for k, v in layer.items() if k != "kind"}
        specs[name] = classes[layer["kind"]](**kwargs)
    workers = [{name: specs[name] for name in names} for names in case["workers"]]
    in_flight = case["max_num_batched_tokens"]  # sync scheduling, one pipeline batch
    try:
        configs = get_kv_cache_configs(
            workers,
            case["available_memory"],
            case["max_model_len"],
            in_flight,
            num_gpu_blocks_override=case["num_gpu_blocks_override"],
            disable_hybrid_kv_cache_manager=case["disable_hybrid_kv_cache_manager"],
        )
    except Exception as exc:  # noqa: BLE001 - the error kind is the result
        estimate = getattr(exc, "estimated_max_model_len", None)
        if isinstance(exc, InsufficientKVCacheMemoryError) and not estimate:
            estimate = None
        return {"error": _error_kind(exc), "estimated_max_model_len": estimate}
    concurrency = get_max_concurrency_for_kv_cache_config(
        configs[0], case["max_model_len"], in_flight
    )
    return _summarize(configs, concurrency, lambda s: type(s).__name__)


def _vllm_config(tmpdir: str) -> Any:
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig

    llama = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    }
    with open(os.path.join(tmpdir, "config.json"), "w") as f:
        json.dump(llama, f)
    model = ModelConfig(
        model=tmpdir,
        tokenizer=None,
        skip_tokenizer_init=True,
        max_model_len=131072,
        dtype="bfloat16",
    )
    sched = SchedulerConfig(
        max_model_len=131072,
        max_num_batched_tokens=2048,
        max_num_seqs=128,
        is_encoder_decoder=False,
        async_scheduling=False,
    )
    config = VllmConfig(
        model_config=model,
        cache_config=CacheConfig(block_size=16),
        scheduler_config=sched,
        device_config=DeviceConfig(device="cpu"),
    )
    config.cache_config.kv_cache_layout = "LBNHC"
    return config


def run_vllm(case: dict[str, Any], config: Any) -> dict[str, Any]:
    """Plan ``case`` with vLLM's real planner (``config`` from ``_vllm_config``)."""
    import torch
    from vllm.v1.core import kv_cache_planning as kp
    from vllm.v1.core.kv_cache_utils import get_max_concurrency_for_kv_cache_config
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        KVQuantMode,
        MLAAttentionSpec,
        SlidingWindowSpec,
    )

    torch_dtypes = {
        "bfloat16": torch.bfloat16,
        "float16": torch.float16,
        "float32": torch.float32,
        "fp8": torch.uint8,
        "fp8_e5m2": torch.uint8,
    }
    classes = {
        "full": FullAttentionSpec,
        "sliding_window": SlidingWindowSpec,
        "chunked_local": ChunkedLocalAttentionSpec,
        "mla": MLAAttentionSpec,
    }
    specs = {}
    for name, layer in case["layers"].items():
        kwargs = {k: v for k, v in layer.items() if k != "kind"}
        kwargs["dtype"] = torch_dtypes[layer["dtype"]]
        if layer["dtype"].startswith("fp8"):
            kwargs["kv_quant_mode"] = KVQuantMode.FP8_PER_TENSOR
        specs[name] = classes[layer["kind"]](**kwargs)
    workers = [{name: specs[name] for name in names} for names in case["workers"]]
    config.model_config.max_model_len = case["max_model_len"]
    config.scheduler_config.max_num_batched_tokens = case["max_num_batched_tokens"]
    config.cache_config.num_gpu_blocks_override = case["num_gpu_blocks_override"]
    config.scheduler_config.disable_hybrid_kv_cache_manager = case[
        "disable_hybrid_kv_cache_manager"
    ]
    assert config.max_in_flight_tokens == case["max_num_batched_tokens"]
    try:
        groups = kp.get_global_kv_cache_groups(config, workers)
        configs = kp.get_kv_cache_configs(config, workers, list(case["available_memory"]), groups)
    except Exception as exc:  # noqa: BLE001 - the error kind is the result
        match = re.search(r"estimated maximum model length is (\d+)", str(exc))
        return {
            "error": _error_kind(exc),
            "estimated_max_model_len": int(match.group(1)) if match else None,
        }
    concurrency = get_max_concurrency_for_kv_cache_config(config, configs[0])
    return _summarize(configs, concurrency, lambda s: type(s).__name__)


def compare(num_cases: int, seed: int, dump: str | None = None) -> tuple[int, list[int]]:
    """Plan every case with both; return (cases, indices of mismatching cases)."""
    cases = make_cases(num_cases, seed)
    mismatches = []
    records = []
    with tempfile.TemporaryDirectory() as tmpdir:
        config = _vllm_config(tmpdir)
        for case in cases:
            expected = run_vllm(case, config)
            actual = run_kvcore(case)
            records.append({"case": case, "vllm": expected})
            if expected != actual:
                mismatches.append(case["index"])
                print(f"case {case['index']}: MISMATCH")
                print("  vllm  :", json.dumps(expected)[:1500])
                print("  kvcore:", json.dumps(actual)[:1500])
            else:
                what = expected.get("error") or [w["num_blocks"] for w in expected["workers"]]
                print(f"case {case['index']}: ok {what}")
    if dump:
        with open(dump, "w") as f:
            json.dump({"vllm_version": "0.33.0", "seed": seed, "records": records}, f)
    return len(cases), mismatches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dump", default=None, help="write cases and vLLM results (JSON)")
    args = parser.parse_args()
    total, bad = compare(args.cases, args.seed, args.dump)
    print(f"{total} cases, {len(bad)} mismatches {bad}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
