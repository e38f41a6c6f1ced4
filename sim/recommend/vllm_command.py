"""A ``vllm serve`` command line with a candidate's engine arguments (vLLM 0.33.0
flag names), so a recommendation can be deployed as simulated.

The engine values are the resolved ones (what the simulated replica ran with: a
``max_num_seqs`` left to vLLM's default is written out as that default), so the
served engine cannot pick other defaults on another version.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from calibrate.catalog import MODEL_DIR
from sim.app.engine_config import EngineConfig
from sim.app.setup import ResolvedRun

_HF = re.compile(r"https://huggingface\.co/([^/\s]+/[^/\s]+)")


def model_id(model: str) -> str:
    """The Hugging Face repository of a catalog model (from its config's ``_source``),
    else ``model`` as given (a path to a model directory)."""
    path = MODEL_DIR / f"{model}.json"
    if path.is_file():
        source = json.loads(path.read_text(encoding="utf-8")).get("_source", "")
        match = _HF.match(str(source))
        if match:
            return match.group(1)
    given = Path(model)
    return str(given.parent) if given.name == "config.json" else model


def serve_args(resolved: ResolvedRun, engine: EngineConfig) -> list[str]:
    """The engine arguments, in vLLM 0.33.0's ``vllm serve`` spelling."""
    args = [
        "--tensor-parallel-size",
        str(engine.tensor_parallel_size),
        "--max-num-seqs",
        str(resolved.max_num_seqs),
        "--max-num-batched-tokens",
        str(resolved.max_num_batched_tokens),
        "--gpu-memory-utilization",
        f"{engine.gpu_memory_utilization:g}",
        "--kv-cache-dtype",
        engine.kv_cache_dtype,
        "--enable-prefix-caching" if engine.enable_prefix_caching else "--no-enable-prefix-caching",
        "--max-model-len",
        str(resolved.max_model_len),
    ]
    if engine.block_size != 16:
        args += ["--block-size", str(engine.block_size)]
    if not engine.enable_chunked_prefill:
        args.append("--no-enable-chunked-prefill")
    if engine.long_prefill_token_threshold:
        args += ["--long-prefill-token-threshold", str(engine.long_prefill_token_threshold)]
    if engine.scheduling_policy != "fcfs":
        args += ["--scheduling-policy", engine.scheduling_policy]
    if engine.num_gpu_blocks_override is not None:
        args += ["--num-gpu-blocks-override", str(engine.num_gpu_blocks_override)]
    return args


def serve_command(model: str, resolved: ResolvedRun, engine: EngineConfig) -> str:
    """The whole command line, shell-quoted."""
    return shlex.join(["vllm", "serve", model_id(model), *serve_args(resolved, engine)])
