"""Which knobs and behaviours a set of random step cases exercises.

:func:`case_features` names the features of one case from its config, trace and
kvcore's replay lines; :data:`REQUIRED_FEATURES` are those every conformance run of
200+ traces must contain (the test suite asserts it), so the generator cannot silently
stop covering a knob the conformance issue lists.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

REQUIRED_FEATURES = (
    "prefix_exact_multiple",
    "prefix_one_short",
    "chunked_prefill_on",
    "chunked_prefill_off",
    "long_prefill_threshold",
    "policy_fcfs",
    "policy_priority",
    "priority_ties",
    "watermark",
    "reserve_full_isl_on",
    "reserve_full_isl_off",
    "max_model_len_stop",
    "cache_salt",
    "lora",
    "groups_full+sliding_window",
    "groups_full+chunked_local",
    "groups_sliding_window",
    "prefix_caching_off",
    "hash_sha256",
    "hash_sha256_cbor",
    "hash_xxhash",
    "hash_xxhash_cbor",
    "kv_events",
    "preempted",
    "preempted_5_times",
    "resumed_with_own_hits",
    "prefix_hits",
)


def case_features(
    config: dict[str, Any], trace: list[dict[str, Any]], lines: Iterable[dict[str, Any]]
) -> set[str]:
    """Feature names of one case (``lines``: kvcore's replay of it)."""
    bs = config["block_size"]
    f = {
        f"hash_{config['prefix_caching_hash_algo']}",
        f"policy_{config['policy']}",
        "groups_" + "+".join(config["kv_groups"]),
    }
    f.add("chunked_prefill_on" if config["enable_chunked_prefill"] else "chunked_prefill_off")
    f.add("reserve_full_isl_on" if config["scheduler_reserve_full_isl"] else "reserve_full_isl_off")
    if not config["enable_prefix_caching"]:
        f.add("prefix_caching_off")
    if config["long_prefill_token_threshold"]:
        f.add("long_prefill_threshold")
    if config["watermark"]:
        f.add("watermark")
    if config.get("enable_kv_cache_events"):
        f.add("kv_events")
    prompts = [r["prompt_token_ids"] for r in trace]
    for a in range(len(prompts)):
        for b in range(a):
            n = _common_prefix(prompts[a], prompts[b])
            if n and n % bs == 0:
                f.add("prefix_exact_multiple")
            if n and (n + 1) % bs == 0:
                f.add("prefix_one_short")
    if any("cache_salt" in r for r in trace):
        f.add("cache_salt")
    if any("lora_id" in r for r in trace):
        f.add("lora")
    priorities = Counter((r["arrival_step"], r.get("priority", 0)) for r in trace)
    if config["policy"] == "priority" and max(priorities.values()) > 1:
        f.add("priority_ties")
    f |= _behaviour(config, trace, list(lines))
    return f


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _behaviour(
    config: dict[str, Any], trace: list[dict[str, Any]], lines: list[dict[str, Any]]
) -> set[str]:
    f: set[str] = set()
    steps = [x for x in lines if x.get("type") == "step"]
    preempted = sum(len(s["preempted"]) for s in steps)
    if preempted:
        f.add("preempted")
    if preempted >= 5:
        f.add("preempted_5_times")
    if any(s["prefix_cache"]["preempted_hits"] for s in steps):
        f.add("resumed_with_own_hits")
    if any(s["prefix_cache"]["hits"] for s in steps):
        f.add("prefix_hits")
    limit = config.get("max_model_len")
    if limit and any(len(r["prompt_token_ids"]) + r["max_tokens"] > limit for r in trace):
        f.add("max_model_len_stop")
    return f


def coverage(cases: Iterable[tuple[dict, list, list]]) -> Counter:
    """How many cases show each feature."""
    counts: Counter = Counter()
    for config, trace, lines in cases:
        counts.update(case_features(config, trace, lines))
    return counts
