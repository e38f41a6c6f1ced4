"""A P/D (NIXL connector) conformance case's knobs and their defaults, one list for both
replays: kvcore's (:mod:`sim.conformance.pd`) and vLLM's (``pd_driver.py``, which loads
this file by path in the oracle environment: standard library only).

``role``: ``prefill`` (a ``kv_producer`` instance; requests carry
``do_remote_decode``) or ``decode`` (``kv_consumer``; requests carry
``do_remote_prefill`` and the prefill side's ``remote_block_ids``); ``kv_both``: the
instance runs with the deprecated ``kv_role="kv_both"`` instead (producer and
consumer at once). ``mode``: vLLM's
``NixlPullConnector`` (default) or ``NixlPushConnector``. ``lease_steps``: after how
many steps the fake worker lets an unread prefill-side lease run out.
"""

from __future__ import annotations

from typing import Any

DEFAULTS: dict[str, Any] = {
    "role": "prefill",
    "kv_both": False,
    "mode": "pull",
    "async_scheduling": False,
    "kv_load_failure_policy": "fail",
    "block_size": 16,
    "num_gpu_blocks": None,
    "max_num_seqs": 8,
    "max_num_batched_tokens": 256,
    "enable_chunked_prefill": True,
    "long_prefill_token_threshold": 0,
    "policy": "fcfs",
    "scheduler_reserve_full_isl": True,
    "max_model_len": None,
    "sample_token_id": 7,
    "prefix_caching_hash_algo": "sha256",
    "none_hash_seed": "vllm-none-hash",
    "lease_steps": 12,
}


def kv_role(cfg: dict[str, Any]) -> str:
    """The instance's ``kv_role``."""
    if cfg["kv_both"]:
        return "kv_both"
    return "kv_producer" if cfg["role"] == "prefill" else "kv_consumer"


PARAM_KEYS = (
    "do_remote_prefill",
    "do_remote_decode",
    "remote_block_ids",
    "remote_request_id",
    "remote_num_tokens",
    "remote_prefill_cached_tokens",
    "transfer_mode",
)
"""The fields of a finished request's ``kv_transfer_params`` that step lines compare
(the rest are the engine's address and parallel sizes, fixed here)."""


def params_json(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """The compared part of a finished request's transfer parameters."""
    if params is None:
        return None
    out: dict[str, Any] = {}
    for key in PARAM_KEYS:
        if key not in params:
            continue
        value = params[key]
        if key == "remote_block_ids":
            value = [list(map(int, g)) for g in value]
        out[key] = value
    return out
