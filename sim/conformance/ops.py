"""Op-level conformance: random KVCacheManager op sequences and kvcore's op driver.

:func:`run_ops` drives a :class:`kvcore.kv_cache_manager.KVCacheManager` with the op
list format of the oracle driver's ``ops`` mode (add, get_computed_blocks,
allocate_slots, block_hashes, append_tokens, free, reset_prefix_cache,
get_block_ids) and yields the same ``op`` lines: the op's result, then the free block
count, usage, free-queue order and cached block ids (and KV event kinds when enabled).
:func:`random_ops_case` draws valid op sequences: prefills in one go or in chunks,
decode steps, frees, shared prefixes, failed allocations under pressure.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from kvcore.block_hashing import DEFAULT_NONE_HASH_SEED, BlockHasher
from kvcore.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from kvcore.kv_cache_manager import KVCacheManager
from kvcore.request import LoRARequest, Request
from sim.conformance.generate import HASH_ALGOS, case_rng, prefix_lengths

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
    "none_hash_seed": DEFAULT_NONE_HASH_SEED,
}
_KINDS = {
    "full": "full",
    "sliding_window": "sliding_window",
    "sliding": "sliding_window",
    "swa": "sliding_window",
    "chunked_local": "chunked_local",
    "chunked": "chunked_local",
}


def build_manager(cfg: dict[str, Any]) -> KVCacheManager:
    """A KVCacheManager over one pool with one tiny group per ``kv_groups`` entry."""
    bs = int(cfg["block_size"])
    specs = []
    for kind in cfg["kv_groups"]:
        kind = _KINDS[kind]
        if kind == "sliding_window":
            specs.append(SlidingWindowSpec(block_size=bs, sliding_window=cfg["sliding_window"]))
        elif kind == "chunked_local":
            specs.append(
                ChunkedLocalAttentionSpec(
                    block_size=bs, attention_chunk_size=cfg["attention_chunk_size"]
                )
            )
        else:
            specs.append(FullAttentionSpec(block_size=bs))
    groups = [KVCacheGroupSpec([f"layer{i}"], s) for i, s in enumerate(specs)]
    return KVCacheManager(
        KVCacheConfig(int(cfg["num_gpu_blocks"]), [], groups),
        max_model_len=int(cfg["max_model_len"]),
        enable_caching=bool(cfg["enable_caching"]),
        enable_kv_cache_events=bool(cfg["enable_kv_cache_events"]),
        watermark=float(cfg["watermark"]),
    )


def run_ops(
    ops: list[dict[str, Any]], config: dict[str, Any], check_invariants: bool = False
) -> Iterator[dict[str, Any]]:
    """Yield one ``op`` line per op, then a summary (as the driver's ops mode)."""
    cfg = dict(OPS_DEFAULTS, **config)
    manager = build_manager(cfg)
    hasher = BlockHasher.from_name(int(cfg["block_size"]), cfg["hash_algo"], cfg["none_hash_seed"])
    session = _OpSession(manager, hasher)
    for i, op in enumerate(ops):
        line: dict[str, Any] = {"type": "op", "i": i, "op": op["op"]}
        rid = op.get("request_id")
        if rid is not None:
            line["request_id"] = rid
        line.update(session.apply(op, rid))
        if check_invariants:
            manager.check_invariants()
        line.update(_manager_state(manager))
        if cfg["enable_kv_cache_events"]:
            line["kv_events"] = [type(e).__name__ for e in manager.take_events()]
        yield line
    stats = manager.make_prefix_cache_stats()
    yield {
        "type": "summary",
        "prefix_cache": {"requests": stats.requests, "queries": stats.queries, "hits": stats.hits},
    }


def _manager_state(manager: KVCacheManager) -> dict[str, Any]:
    """The manager's state after an op: free block count, usage (rounded to 6
    digits), the free queue's block ids in order, the cached block ids (sorted)."""
    pool = manager.block_pool
    return {
        "num_free_blocks": pool.get_num_free_blocks(),
        "usage": round(manager.usage, 6),
        "free_queue": [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
        "cached_block_ids": sorted(b.block_id for b in pool.blocks if b.block_hash is not None),
    }


class _OpSession:
    """The requests of an op sequence on one manager, and the prefix-cache lookups
    waiting for their ``allocate_slots``."""

    def __init__(self, manager: KVCacheManager, hasher: BlockHasher) -> None:
        self.manager = manager
        self.hasher = hasher
        self.reqs: dict[str, Request] = {}
        self.lookups: dict[str, tuple[Any, int]] = {}

    def add(self, rid: str, op: dict[str, Any]) -> Request:
        """Create the request of an ``add`` op (arrival time: its index by default)."""
        lora = LoRARequest.from_id(op["lora_id"]) if op.get("lora_id") else None
        req = Request(
            rid,
            op["prompt_token_ids"],
            int(op.get("max_tokens", 1 << 20)),
            arrival_time=float(op.get("arrival_time", len(self.reqs))),
            priority=int(op.get("priority", 0)),
            lora_request=lora,
            cache_salt=op.get("cache_salt"),
            block_hasher=self.hasher,
        )
        self.reqs[rid] = req
        return req

    def apply(self, op: dict[str, Any], rid: Any) -> dict[str, Any]:
        """Run one op on request ``rid``; the result fields of its line."""
        manager, reqs, kind = self.manager, self.reqs, op["op"]
        if kind == "add":
            return {"num_block_hashes": len(self.add(rid, op).block_hashes)}
        if kind == "get_computed_blocks":
            blocks, hits = manager.get_computed_blocks(reqs[rid], op.get("max_cache_hit_length"))
            self.lookups[rid] = (blocks, hits)
            return {
                "block_ids": [list(g) for g in blocks.get_block_ids()],
                "num_computed_tokens": hits,
            }
        if kind == "allocate_slots":
            return _allocate(manager, reqs[rid], op, self.lookups.pop(rid, None))
        if kind == "block_hashes":
            return {"block_hashes": [bytes(h).hex() for h in reqs[rid].block_hashes]}
        if kind == "append_tokens":
            reqs[rid].append_output_token_ids(list(op["token_ids"]))
            return {
                "num_tokens": reqs[rid].num_tokens,
                "num_block_hashes": len(reqs[rid].block_hashes),
            }
        if kind == "free":
            manager.free(reqs[rid])
            return {}
        if kind == "reset_prefix_cache":
            return {"ok": bool(manager.reset_prefix_cache())}
        if kind == "get_block_ids":
            return {"block_ids": [list(g) for g in manager.get_block_ids(rid)]}
        raise ValueError(f"unknown op {kind!r}")


def _allocate(
    manager: KVCacheManager, req: Request, op: dict[str, Any], lookup: tuple[Any, int] | None
) -> dict[str, Any]:
    """An ``allocate_slots`` op (after the request's lookup ``lookup``, if any); the
    result fields of its line."""
    blocks, hits = lookup if lookup else (None, 0)
    n = op["num_new_tokens"]
    if n == "rest":
        n = req.num_tokens - req.num_computed_tokens - hits
    new = manager.allocate_slots(
        req,
        int(n),
        num_new_computed_tokens=hits,
        new_computed_blocks=blocks,
        num_lookahead_tokens=int(op.get("num_lookahead_tokens", 0)),
        full_sequence_must_fit=bool(op.get("full_sequence_must_fit")),
    )
    if new is None:
        return {
            "num_new_tokens": n,
            "new_block_ids": None,
            "num_computed_tokens": req.num_computed_tokens,
        }
    if lookup is not None:
        manager.record_prefix_cache_stats(req, hits)
    req.num_computed_tokens += hits + int(n)
    return {
        "num_new_tokens": n,
        "new_block_ids": [list(g) for g in new.get_block_ids()],
        "num_computed_tokens": req.num_computed_tokens,
    }


def run_kvcore_ops(config: dict[str, Any], ops: list[dict[str, Any]]) -> list[dict] | str:
    """kvcore's lines for an op case, or an error message."""
    try:
        return list(run_ops(ops, config))
    except Exception as e:  # noqa: BLE001 - any failure is a mismatch to report
        return f"{type(e).__name__}: {e}"


def random_ops_case(seed: int, index: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A valid random op sequence and its manager config."""
    rng = case_rng(seed, index, stream=1)
    bs = int(rng.choice([4, 8, 16]))
    groups = [
        ["full"],
        ["full"],
        ["full", "sliding_window"],
        ["full", "chunked_local"],
        ["sliding_window"],
    ][int(rng.integers(5))]
    config: dict[str, Any] = {
        "num_gpu_blocks": int(rng.integers(8, 48)),
        "block_size": bs,
        "enable_caching": bool(rng.random() < 0.85),
        "hash_algo": HASH_ALGOS[int(rng.integers(4))],
        "kv_groups": groups,
        "enable_kv_cache_events": bool(rng.random() < 0.4),
        "watermark": float(rng.choice([0.0, 0.0, 0.05, 0.2])),
        "max_model_len": 4096,
    }
    if "sliding_window" in groups:
        config["sliding_window"] = int(rng.integers(1, 5 * bs + 1))
    if "chunked_local" in groups:
        config["attention_chunk_size"] = bs * int(rng.integers(1, 5))
    return config, _random_ops(rng, bs)


def _random_ops(rng: np.random.Generator, bs: int) -> list[dict[str, Any]]:
    families = [[int(t) for t in rng.integers(1, 1000, size=n)] for n in prefix_lengths(rng, bs, 3)]
    ops: list[dict[str, Any]] = []
    live: dict[str, dict[str, int]] = {}  # rid -> {"tokens", "computed", "looked"}
    for n in range(int(rng.integers(20, 70))):
        roll = rng.random()
        if roll < 0.25 or not live:
            rid = f"q{n}"
            prompt = families[int(rng.integers(3))][: int(rng.integers(1, 200))]
            prompt = prompt + [int(t) for t in rng.integers(1000, 2000, int(rng.integers(0, 40)))]
            op: dict[str, Any] = {"op": "add", "request_id": rid, "prompt_token_ids": prompt}
            if rng.random() < 0.2:
                op["cache_salt"] = "salt"
            if rng.random() < 0.2:
                op["lora_id"] = int(rng.integers(1, 3))
            ops.append(op)
            live[rid] = {"tokens": len(prompt), "computed": 0, "looked": 0}
            continue
        rid = sorted(live)[int(rng.integers(len(live)))]
        st = live[rid]
        if roll < 0.35:
            ops.append({"op": "free", "request_id": rid})
            del live[rid]
        elif roll < 0.38:
            ops.append({"op": "reset_prefix_cache"})
        elif roll < 0.42:
            ops.append(
                {"op": str(rng.choice(["block_hashes", "get_block_ids"])), "request_id": rid}
            )
        elif st["computed"] == 0 and not st["looked"]:
            ops.append({"op": "get_computed_blocks", "request_id": rid})
            st["looked"] = 1
        elif st["computed"] < st["tokens"]:
            chunk = (
                "rest"
                if rng.random() < 0.6 or st["looked"]
                else int(rng.integers(1, st["tokens"] - st["computed"] + 1))
            )
            op = {"op": "allocate_slots", "request_id": rid, "num_new_tokens": chunk}
            if rng.random() < 0.15:
                op["full_sequence_must_fit"] = True
            if rng.random() < 0.1:
                op["num_lookahead_tokens"] = int(rng.integers(1, 4))
            ops.append(op)
            st["looked"] = 0
            st["computed"] = st["tokens"] if chunk == "rest" else st["computed"] + chunk
        else:
            ops.append({"op": "append_tokens", "request_id": rid, "token_ids": [7]})
            ops.append({"op": "allocate_slots", "request_id": rid, "num_new_tokens": 1})
            st["tokens"] += 1
            st["computed"] += 1
    return ops
