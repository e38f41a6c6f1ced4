"""What the oracle's modes share: a request's set-up (the contract in
``vllm_driver.py``'s docstring, which kvsim mirrors), input documents, and the JSON
form of vLLM's KV-cache events and of ratios.

Part of the oracle driver; ``offload_driver.py`` builds its requests here too.
Standard library and vLLM only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from vllm.lora.request import LoRARequest
from vllm.sampling_params import SamplingParams
from vllm.v1.request import Request


def event_to_json(event: Any) -> dict[str, Any]:
    """Serialise one vLLM KV-cache event to the samples' compact form."""
    if isinstance(event, BlockStored):
        return {
            "type": "BlockStored",
            "block_hashes": list(event.block_hashes),
            "parent_block_hash": event.parent_block_hash,
            "num_tokens": len(event.token_ids),
            "block_size": event.block_size,
            "group_idx": event.group_idx,
        }
    if isinstance(event, BlockRemoved):
        return {
            "type": "BlockRemoved",
            "block_hashes": list(event.block_hashes),
            "group_idx": event.group_idx,
        }
    if isinstance(event, AllBlocksCleared):
        return {"type": "AllBlocksCleared"}
    return {"type": type(event).__name__}


def lora_request_for(lora_id: int | None) -> LoRARequest | None:
    """The LoRARequest used for an integer lora_id (see module docstring)."""
    if lora_id is None:
        return None
    lid = int(lora_id)
    return LoRARequest(lora_name=f"lora{lid}", lora_int_id=lid, lora_path=f"/lora/{lid}")


def make_request(
    spec: dict[str, Any],
    arrival_time: float,
    block_hasher: Callable[[Request], list[Any]],
    max_tokens: int,
) -> Request:
    """Build a vLLM Request from a trace or op entry."""
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    return Request(
        request_id=str(spec["request_id"]),
        prompt_token_ids=list(spec["prompt_token_ids"]),
        sampling_params=params,
        pooling_params=None,
        arrival_time=arrival_time,
        lora_request=lora_request_for(spec.get("lora_id")),
        cache_salt=spec.get("cache_salt"),
        priority=int(spec.get("priority", 0)),
        block_hasher=block_hasher,
    )


def ordered_trace(trace: list[dict[str, Any]]) -> list[tuple[float, dict[str, Any]]]:
    """Requests sorted stably by arrival step, each with its arrival time."""
    reqs = sorted(trace, key=lambda r: int(r["arrival_step"]))
    return [(int(r["arrival_step"]) + i * 1e-9, r) for i, r in enumerate(reqs)]


def rounded(x: float) -> float:
    """Round a ratio to 6 decimals as the samples do."""
    return round(float(x), 6)


def load_json(value: Any) -> Any:
    """A JSON document given inline, or as a path to a file."""
    if isinstance(value, str):
        with open(value) as f:
            return json.load(f)
    return value


def source_name(value: Any) -> str:
    """File name recorded in headers for a trace given as path or inline."""
    return os.path.basename(value) if isinstance(value, str) else "<inline>"
