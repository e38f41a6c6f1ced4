"""Seeded random step traces and scheduler knobs for differential conformance.

Every case is a plain JSON-able pair ``(config, trace)``: ``config`` uses the steps-mode
keys of the oracle driver (also the field names of :class:`kvcore.replay.ReplayConfig`)
and ``trace`` is a step-indexed replay trace. A case depends only on ``(seed, index)``,
drawn from its own :class:`numpy.random.Generator`, so one failing case can be rebuilt
without the others.

The knobs cover what the conformance issue lists: shared prefixes of many lengths
(exact block multiples, one token short, one token over), KV pressure deep enough to
preempt repeatedly, chunked prefill on and off, ``long_prefill_token_threshold``, FCFS
and priority (with ties), watermark, reserve-full-ISL, ``max_model_len`` caps that stop
requests, ``cache_salt`` and LoRA ids, full + sliding-window, full + chunked-local and
sliding-window-only groups, prefix caching off, every hash algorithm and KV events.
Some cases abort requests (``abort_step``: a client going away) while they wait, run
or have a batch in flight; the aborts come from a stream of their own, so a case
without aborts is the case it was before aborts existed.

Validity rules kept (vLLM rejects or livelocks otherwise): ``max_num_batched_tokens >=
max_num_seqs``; without chunked prefill ``max_num_batched_tokens >= max_model_len``;
``long_prefill_token_threshold <= max_model_len``; every prompt shorter than
``max_model_len``; enough blocks for the longest request to run alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvcore.spec_decode import SPEC_METHODS

HASH_ALGOS = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")
GROUP_LAYOUTS = (
    (("full",), 0.50),
    (("full", "sliding_window"), 0.18),
    (("full", "chunked_local"), 0.12),
    (("sliding_window",), 0.08),
    (("full", "sliding_window", "chunked_local"), 0.04),
    (("chunked_local",), 0.04),
    (("sliding_window", "sliding_window"), 0.04),
)
BLOCK_SIZES = (1, 2, 4, 8, 8, 16, 16, 16, 32, 64)

Case = tuple[dict[str, Any], list[dict[str, Any]]]


def case_rng(seed: int, index: int, stream: int = 0) -> np.random.Generator:
    """The generator of case ``index`` of run ``seed`` (``stream`` separates case kinds)."""
    return np.random.default_rng([seed, stream, index])


def _pick(rng: np.random.Generator, options: Any) -> Any:
    return options[int(rng.integers(len(options)))]


def _chance(rng: np.random.Generator, p: float) -> bool:
    return bool(rng.random() < p)


def prefix_lengths(rng: np.random.Generator, block_size: int, count: int) -> list[int]:
    """Shared-prefix lengths: exact block multiples, one short, one over, or random."""
    out = []
    for _ in range(count):
        blocks = int(rng.integers(1, 9))
        shape = _pick(rng, ("exact", "short", "over", "random"))
        length = blocks * block_size
        if shape == "short":
            length -= 1
        elif shape == "over":
            length += 1
        elif shape == "random":
            length = int(rng.integers(1, 9 * block_size))
        out.append(max(1, length))
    return out


def random_trace(rng: np.random.Generator, block_size: int, policy: str) -> list[dict[str, Any]]:
    """5-40 requests over a few prefix families; no max_model_len applied yet."""
    num_requests = int(rng.integers(5, 41))
    families = [
        [int(t) for t in rng.integers(1, 30000, size=length)]
        for length in prefix_lengths(rng, block_size, int(rng.integers(1, 5)))
    ]
    spread = int(_pick(rng, (0, 3, 10, 30)))
    salts = ("s1", "s2")
    trace = []
    prompts: list[list[int]] = []
    for i in range(num_requests):
        if prompts and _chance(rng, 0.1):
            prompt = list(_pick(rng, prompts))  # an exact repeat: all but the last token hit
        else:
            prompt = []
            if _chance(rng, 0.75):
                family = _pick(rng, families)
                cut = len(family) if _chance(rng, 0.6) else int(rng.integers(1, len(family) + 1))
                prompt = family[:cut]
            suffix = int(rng.integers(0 if prompt else 1, 3 * block_size + 40))
            prompt = prompt + [int(t) for t in rng.integers(30000, 60000, size=suffix)]
        prompts.append(prompt)
        req: dict[str, Any] = {
            "request_id": f"r{i}",
            "arrival_step": int(rng.integers(0, spread + 1)),
            "prompt_token_ids": prompt,
            "max_tokens": int(
                _pick(
                    rng,
                    (
                        1,
                        2,
                        int(rng.integers(1, 17)),
                        int(rng.integers(1, 65)),
                        int(rng.integers(16, 129)),
                    ),
                )
            ),
        }
        if policy == "priority" or _chance(rng, 0.2):
            req["priority"] = int(rng.integers(0, 3))  # few values: many ties
        if _chance(rng, 0.15):
            req["cache_salt"] = _pick(rng, salts)
        if _chance(rng, 0.15):
            req["lora_id"] = int(rng.integers(1, 3))
        trace.append(req)
    return trace


def _kv_groups(rng: np.random.Generator) -> tuple[str, ...]:
    weights = np.array([w for _, w in GROUP_LAYOUTS])
    return GROUP_LAYOUTS[int(rng.choice(len(GROUP_LAYOUTS), p=weights / weights.sum()))][0]


def min_blocks_for(max_model_len: int, block_size: int, num_groups: int) -> int:
    """Blocks that let one request of ``max_model_len`` tokens run alone (plus null)."""
    per_group = -(-max_model_len // block_size) + 1
    return 1 + num_groups * per_group


def random_config(
    rng: np.random.Generator, trace: list[dict[str, Any]], block_size: int, policy: str
) -> dict[str, Any]:
    """Knobs for ``trace``; may shorten prompts so they fit a capped max_model_len."""
    groups = _kv_groups(rng)
    natural = max(len(r["prompt_token_ids"]) + r["max_tokens"] for r in trace)
    max_model_len = None
    if _chance(rng, 0.3):  # a cap below some prompt + max_tokens: those stop early
        longest = max(len(r["prompt_token_ids"]) for r in trace)
        max_model_len = int(rng.integers(max(2, longest // 2), natural + 1))
        for r in trace:
            r["prompt_token_ids"] = r["prompt_token_ids"][: max_model_len - 1]
    model_len = max_model_len or natural
    max_num_seqs = int(_pick(rng, (1, 2, 4, 8, 16, 32)))
    chunked = _chance(rng, 0.7)
    budget = int(_pick(rng, (16, 32, 64, 128, 256, 512, 2048)))
    threshold = 0
    if _chance(rng, 0.3):
        threshold = int(rng.integers(1, min(model_len, _pick(rng, (16, 160, model_len))) + 1))
    floor = min_blocks_for(model_len, block_size, len(groups))
    pressure = _pick(rng, ("deep", "deep", "deep", "some", "some", "none"))
    if pressure == "deep":  # many requests at once on a pool that fits few
        max_num_seqs = max(max_num_seqs, 4)
    total = sum(len(r["prompt_token_ids"]) + r["max_tokens"] for r in trace) // block_size
    extra = {
        "deep": int(rng.integers(0, 6)),
        "some": int(rng.integers(0, max(2, total // 3) + 1)),
        "none": total * len(groups) + 8,
    }[pressure]
    budget = max(budget, max_num_seqs)
    if not chunked:
        budget = max(budget, model_len)
    config: dict[str, Any] = {
        "block_size": block_size,
        "num_gpu_blocks": floor + extra,
        "enable_prefix_caching": _chance(rng, 0.85),
        "prefix_caching_hash_algo": _pick(rng, HASH_ALGOS),
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": budget,
        "enable_chunked_prefill": chunked,
        "long_prefill_token_threshold": threshold,
        "policy": policy,
        "watermark": float(_pick(rng, (0.0, 0.0, 0.0, 0.01, 0.05, 0.1, 0.2, 0.4))),
        "scheduler_reserve_full_isl": _chance(rng, 0.5),
        "max_model_len": max_model_len,
        "kv_groups": list(groups),
        "sample_token_id": int(rng.integers(0, 100)),
        "enable_kv_cache_events": _chance(rng, 0.35),
    }
    if "sliding_window" in groups:
        config["sliding_window"] = int(rng.integers(1, 7 * block_size + 1))
    if "chunked_local" in groups:
        config["attention_chunk_size"] = block_size * int(rng.integers(1, 7))
    if _chance(rng, 0.2):
        config["dump_block_tables"] = True
    return config


ABORT_CASE_CHANCE = 0.4
"""Share of cases with aborts; in those, each request is aborted with chance 0.3."""


def add_aborts(rng: np.random.Generator, trace: list[dict[str, Any]]) -> None:
    """Give some requests an abort: ``abort_step`` (before that step's schedule) or
    ``abort_in_step`` (while that step runs; at most one per step, as vLLM frees the
    requests of one aborts-queue read in set order), from arrival (still waiting) up to
    a little after the request would have finished unaborted (a no-op)."""
    if not _chance(rng, ABORT_CASE_CHANCE):
        return
    taken: set[int] = set()
    for r in trace:
        if _chance(rng, 0.3):
            step = r["arrival_step"] + int(rng.integers(0, r["max_tokens"] + 12))
            in_step = _chance(rng, 0.5) and step not in taken
            if in_step:
                taken.add(step)
            r["abort_in_step" if in_step else "abort_step"] = step


def add_speculative(rng: np.random.Generator, config: dict[str, Any]) -> None:
    """Speculative decoding knobs: 1-4 draft tokens, one of the modelled methods. A
    ``long_prefill_token_threshold`` below ``1 + k`` is raised to it (vLLM asserts
    that a padded one-token admission keeps all ``1 + k`` rows)."""
    k = int(rng.integers(1, 5))
    config["num_speculative_tokens"] = k
    config["speculative_method"] = str(_pick(rng, SPEC_METHODS))
    threshold = config["long_prefill_token_threshold"]
    if 0 < threshold < 1 + k:
        config["long_prefill_token_threshold"] = 1 + k


def random_case(
    seed: int, index: int, async_scheduling: bool = False, spec_decode: bool = False
) -> Case:
    """Step case ``index`` of run ``seed``: (driver/ReplayConfig knobs, replay trace).

    ``async_scheduling`` only adds that knob: the trace and the other knobs are those
    of the synchronous case. ``spec_decode`` adds speculative decoding knobs, drawn
    from a stream of their own."""
    rng = case_rng(seed, index)
    block_size = int(_pick(rng, BLOCK_SIZES))
    policy = "priority" if _chance(rng, 0.35) else "fcfs"
    trace = random_trace(rng, block_size, policy)
    config = random_config(rng, trace, block_size, policy)
    add_aborts(case_rng(seed, index, stream=2), trace)
    if async_scheduling:
        config["async_scheduling"] = True
    if spec_decode:
        add_speculative(case_rng(seed, index, stream=3), config)
    return config, trace
