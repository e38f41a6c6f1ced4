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
    "abort_waiting",
    "abort_scheduled",
    "abort_in_step",
)

REQUIRED_ASYNC_FEATURES = (
    "async_max_tokens_skip",
    "async_preempted_in_flight",
    "async_stale_output",
    "async_stale_finish",
    "async_arrival_while_in_flight",
    "async_abort_in_flight",
    "async_abort_deferred",
)
"""What every async run of 200+ traces must also contain: a running request not
scheduled again while its step in flight samples its last token; a preemption of a
request with output in flight; that output delivered to the preempted request, once
finishing it; a request arriving while a batch is in flight; a request aborted while
a batch that scheduled it is in flight; an abort that came during an iteration that
applied no output, made at the next step."""


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
    stats = [s["prefix_cache"] for s in steps if s["prefix_cache"] is not None]
    if any(p["preempted_hits"] for p in stats):
        f.add("resumed_with_own_hits")
    if any(p["hits"] for p in stats):
        f.add("prefix_hits")
    seen: set[str] = set()
    in_step = {r.get("abort_in_step"): r["request_id"] for r in trace}
    for s in steps:
        scheduled = {e["id"] for e in s["scheduled"]}
        for rid in s.get("aborted", ()):
            f.add("abort_scheduled" if rid in seen else "abort_waiting")
            if in_step.get(s["step"]) == rid and rid in scheduled:
                f.add("abort_in_step")  # aborted while the step that scheduled it ran
        seen |= scheduled
    if config.get("async_scheduling"):
        f |= _async_behaviour(trace, steps)
    limit = config.get("max_model_len")
    if limit and any(len(r["prompt_token_ids"]) + r["max_tokens"] > limit for r in trace):
        f.add("max_model_len_stop")
    return f


def _async_behaviour(trace: list[dict[str, Any]], steps: list[dict[str, Any]]) -> set[str]:
    """Features of an async replay (its step lines carry ``in_flight`` and ``applied_step``)."""
    f: set[str] = set()
    arrivals = {r["arrival_step"] for r in trace}
    in_step = {r["request_id"]: r.get("abort_in_step") for r in trace}
    in_flight_before: list[int] = []
    scheduled_in: dict[int, set[str]] = {}
    for s in steps:
        ids = {e["id"] for e in s["scheduled"]}
        scheduled_in[s["step"]] = ids
        if s["step"] in arrivals and s["step"] > 0 and in_flight_before:
            f.add("async_arrival_while_in_flight")
        flown = set().union(*(scheduled_in[k] for k in in_flight_before))
        if any(rid in flown for rid in s.get("aborted", ())):
            f.add("async_abort_in_flight")
        if any(in_step.get(rid) == s["step"] - 1 for rid in s.get("aborted", ())):
            f.add("async_abort_deferred")
        applied = scheduled_in.get(s["applied_step"], set())
        if any(rid in applied and rid not in ids for rid in s["finished"]):
            f.add("async_max_tokens_skip")  # not scheduled again while its last token flew
        flying = set().union(*(scheduled_in[k] for k in in_flight_before))
        for rid in s["preempted"]:
            if rid in flying:
                f.add("async_preempted_in_flight")
                if rid in s["new_tokens"]:
                    f.add("async_stale_output")
                if rid in s["finished"]:
                    f.add("async_stale_finish")
        in_flight_before = s["in_flight"]
    return f


def coverage(cases: Iterable[tuple[dict, list, list]]) -> Counter:
    """How many cases show each feature."""
    counts: Counter = Counter()
    for config, trace, lines in cases:
        counts.update(case_features(config, trace, lines))
    return counts
