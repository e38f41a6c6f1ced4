"""The oracle's ``ops`` mode: vLLM's ``KVCacheManager`` driven op by op (the ops and
their knobs are in ``vllm_driver.py``'s docstring).

Part of the oracle driver; standard library and vLLM only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import vllm
from oracle_load import load_by_path
from vllm.v1.core import kv_cache_utils
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
from vllm.v1.request import Request

oracle_config = load_by_path("oracle_config.py")
oracle_common = load_by_path("oracle_common.py")


class OpsReplay:
    """Drives a KVCacheManager op by op."""

    def __init__(self, ops: list[dict[str, Any]], cfg: dict[str, Any]) -> None:
        self.ops = ops
        self.cfg = cfg
        self.requests: dict[str, Request] = {}
        self.lookups: dict[str, tuple[Any, int]] = {}

    def build(self) -> dict[str, Any]:
        """Build the manager and return the header line."""
        cfg = self.cfg
        hash_fn, none_hash = oracle_config.init_none_hash(cfg["hash_algo"], cfg["none_hash_seed"])
        bs = int(cfg["block_size"])
        self.block_hasher = kv_cache_utils.get_request_block_hasher(bs, hash_fn)
        vllm_config = oracle_config.build_vllm_config(
            ops_as_steps_config(cfg), int(cfg["max_model_len"])
        )
        register_all_kvcache_specs(vllm_config)
        self.manager = KVCacheManager(
            kv_cache_config=oracle_config.kv_cache_config_for(cfg),
            max_model_len=int(cfg["max_model_len"]),
            scheduler_block_size=bs,
            hash_block_size=bs,
            enable_caching=bool(cfg["enable_caching"]),
            log_stats=True,
            enable_kv_cache_events=bool(cfg["enable_kv_cache_events"]),
            watermark=float(cfg["watermark"]),
        )
        return {
            "type": "header",
            "vllm_version": vllm.__version__,
            "num_gpu_blocks": int(cfg["num_gpu_blocks"]),
            "block_size": bs,
            "enable_caching": bool(cfg["enable_caching"]),
            "kv_groups": ",".join(oracle_config.GROUP_KINDS[k][1] for k in cfg["kv_groups"]),
            "coordinator": type(self.manager.coordinator).__name__,
            "hash_algo": cfg["hash_algo"],
            "none_hash_seed": cfg["none_hash_seed"],
            "none_hash": none_hash.hex(),
        }

    def state(self) -> dict[str, Any]:
        """Pool state appended to every op line."""
        pool = self.manager.block_pool
        cached: set[int] = set()
        for value in pool.cached_block_hash_to_block._cache.values():
            group = value.values() if isinstance(value, dict) else [value]
            cached.update(b.block_id for b in group)
        state = {
            "num_free_blocks": pool.get_num_free_blocks(),
            "usage": oracle_common.rounded(self.manager.usage),
            "free_queue": [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
            "cached_block_ids": sorted(cached),
        }
        if self.cfg["enable_kv_cache_events"]:
            state["kv_events"] = [type(e).__name__ for e in self.manager.take_events()]
        return state

    def op_add(self, op: dict[str, Any]) -> dict[str, Any]:
        """Create a request (hashes its full blocks)."""
        arrival = float(op.get("arrival_time", len(self.requests)))
        req = oracle_common.make_request(
            op, arrival, self.block_hasher, int(op.get("max_tokens", 1 << 20))
        )
        self.requests[req.request_id] = req
        return {"num_block_hashes": len(req.block_hashes)}

    def op_get_computed_blocks(self, op: dict[str, Any]) -> dict[str, Any]:
        """Prefix-cache lookup; the hit is kept for the next allocate_slots."""
        req = self.requests[op["request_id"]]
        blocks, hits, boundary = self.manager.get_computed_blocks(
            req, op.get("max_cache_hit_length")
        )
        req.shared_prefix_boundary = boundary
        self.lookups[req.request_id] = (blocks, hits)
        return {"block_ids": [list(g) for g in blocks.get_block_ids()], "num_computed_tokens": hits}

    def op_allocate_slots(self, op: dict[str, Any]) -> dict[str, Any]:
        """allocate_slots with the pending lookup's hit; 'rest' = all remaining tokens."""
        req = self.requests[op["request_id"]]
        lookup = self.lookups.pop(req.request_id, None)
        blocks, hits = lookup if lookup else (None, 0)
        n = op["num_new_tokens"]
        if n == "rest":
            n = req.num_tokens - req.num_computed_tokens - hits
        new = self.manager.allocate_slots(
            req,
            int(n),
            num_new_computed_tokens=hits,
            new_computed_blocks=blocks,
            num_lookahead_tokens=int(op.get("num_lookahead_tokens", 0)),
            full_sequence_must_fit=bool(op.get("full_sequence_must_fit", False)),
        )
        if new is None:
            return {
                "num_new_tokens": n,
                "new_block_ids": None,
                "num_computed_tokens": req.num_computed_tokens,
            }
        if lookup is not None:
            self.manager.record_prefix_cache_stats(req, hits)
        req.num_computed_tokens += hits + int(n)
        return {
            "num_new_tokens": n,
            "new_block_ids": [list(g) for g in new.get_block_ids()],
            "num_computed_tokens": req.num_computed_tokens,
        }

    def op_block_hashes(self, op: dict[str, Any]) -> dict[str, Any]:
        """The request's block hashes, hex."""
        req = self.requests[op["request_id"]]
        return {"block_hashes": [bytes(h).hex() for h in req.block_hashes]}

    def op_append_tokens(self, op: dict[str, Any]) -> dict[str, Any]:
        """Append output tokens (as the model would); new full blocks get hashed."""
        req = self.requests[op["request_id"]]
        req.append_output_token_ids(list(op["token_ids"]))
        return {"num_tokens": req.num_tokens, "num_block_hashes": len(req.block_hashes)}

    def op_free(self, op: dict[str, Any]) -> dict[str, Any]:
        """Release every block of the request."""
        self.manager.free(self.requests[op["request_id"]])
        return {}

    def op_reset_prefix_cache(self, op: dict[str, Any]) -> dict[str, Any]:
        """Drop the prefix cache (only works when nothing is allocated)."""
        return {"ok": bool(self.manager.reset_prefix_cache())}

    def op_get_block_ids(self, op: dict[str, Any]) -> dict[str, Any]:
        """The request's current block table."""
        ids = self.manager.get_block_ids(op["request_id"])
        return {"block_ids": [list(g) for g in ids]}

    def op_new_step(self, op: dict[str, Any]) -> dict[str, Any]:
        """Tell the manager a scheduler step begins."""
        self.manager.new_step_starts()
        return {}

    def run(self) -> Iterable[dict[str, Any]]:
        """Yield the header, one line per op and the summary."""
        yield self.build()
        for i, op in enumerate(self.ops):
            handler = getattr(self, "op_" + op["op"], None)
            if handler is None:
                raise ValueError(f"unknown op {op['op']!r}")
            line: dict[str, Any] = {"type": "op", "i": i, "op": op["op"]}
            if "request_id" in op:
                line["request_id"] = op["request_id"]
            line.update(handler(op))
            line.update(self.state())
            yield line
        stats = self.manager.make_prefix_cache_stats()
        yield {
            "type": "summary",
            "prefix_cache": {
                "requests": stats.requests if stats else 0,
                "queries": stats.queries if stats else 0,
                "hits": stats.hits if stats else 0,
            },
        }


def ops_as_steps_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """A steps-mode config carrying the ops knobs (to build a VllmConfig)."""
    steps = dict(oracle_config.STEPS_DEFAULTS)
    steps.update(
        block_size=cfg["block_size"],
        num_gpu_blocks=cfg["num_gpu_blocks"],
        enable_prefix_caching=cfg["enable_caching"],
        prefix_caching_hash_algo=cfg["hash_algo"],
        max_num_batched_tokens=max(2048, int(cfg["max_model_len"])),
    )
    return steps


def run_ops(ops: Any, config: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """Drive a KVCacheManager from an op list (path or list)."""
    cfg = oracle_config.merged(oracle_config.OPS_DEFAULTS, config)
    return OpsReplay(oracle_common.load_json(ops), cfg).run()
