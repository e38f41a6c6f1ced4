"""Refuse, before it starts, a run far beyond what one machine can simulate.

:func:`estimate_work` estimates what a resolved run implies; :func:`check_work_bounds`
raises ``ValueError`` (one line: the estimate and how to opt in) when it passes any
limit below. ``KVSIM_ALLOW_LARGE=1`` in the environment (or ``allow_large=True``)
skips the check.

The estimate follows vLLM 0.33.0's semantics: a prompt of at least ``max_model_len``
tokens is rejected unseen (no work), and a request's output stops when prompt and
output reach ``max_model_len``, so a request decodes at most
``max_model_len - prompt`` tokens whatever ``output_len`` or ``output_tokens`` says.
For a trace it is exact per row; for a synthetic spec it uses the mean lengths
(prompt plus the shared prefix, plus half a session's history for multi-turn
sessions). Then, with ``c`` the mean context (prompt + decoded tokens) and ``K`` the
KV cache's tokens:

- requests ``N``: ``num_requests``, or the expected arrivals in ``duration_s``
  (closed loop: clients x duration / (think time + one request's decode time));
- decode tokens ``D = N x mean capped output``;
- engine steps, a lower bound: ``max(D / C, mean capped output)`` with the requests in
  flight ``C = min(max_num_seqs, N, K / c)``;
- waiting-request block checks: when ``min(N, max_num_seqs)`` requests of ``c``
  tokens do not fit in the KV cache, a request waits (or was preempted) at nearly
  every step and the scheduler looks its ``c / block_size`` blocks up in the prefix
  cache each time: ``steps x c / block_size``;
- memory: ~500 bytes per request (the bench's 470 MiB for 1,000,000 requests: records
  kept for the summary) plus ~40 bytes per token held by the requests in flight.

Basis (``tests/bench/bench_fastforward.py --million``, pure Python, one core): 1,000,000
``chat`` requests (~270 decode tokens each, 2.7e8 in all, ~1.8e7 engine steps) take
~130 s and 470 MiB; a block check costs ~140 ns (10 requests of 100,000 output
tokens behind a 444k-token KV cache: 1.6e5 steps, ~130 s). The limits, each about ten
minutes or more of simulation, or more memory than a developer machine has to spare:
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_REQUESTS = 10_000_000
"""Requests (~22 minutes and ~5 GB at the bench's rate)."""
MAX_DECODE_TOKENS = 2_000_000_000
"""Decode tokens after vLLM's max_model_len cap (~16 minutes at the bench's rate)."""
MAX_BLOCK_CHECKS = 2_000_000_000
"""Prefix-cache block look-ups by waiting requests (~5 minutes at ~140 ns)."""
MAX_MEMORY_BYTES = 16 * 2**30
"""Estimated memory (16 GiB)."""

ENV_ALLOW = "KVSIM_ALLOW_LARGE"
"""Set to 1 to run whatever the estimate says."""

BYTES_PER_REQUEST = 500
BYTES_PER_TOKEN_IN_FLIGHT = 40
SECONDS_PER_REQUEST = 130e-6
SECONDS_PER_BLOCK_CHECK = 140e-9


@dataclass(frozen=True)
class WorkEstimate:
    """What a run implies (see the module docstring); floats, as estimates."""

    requests: float
    decode_tokens: float
    engine_steps: float
    block_checks: float
    memory_bytes: float

    def seconds(self) -> float:
        """Rough wall time: half the bench's 130 us a request per request, half per
        decode token (270 a request there), plus ~140 ns a block check."""
        return (
            self.requests * SECONDS_PER_REQUEST / 2
            + self.decode_tokens * SECONDS_PER_REQUEST / 2 / 270
            + self.block_checks * SECONDS_PER_BLOCK_CHECK
        )


def _expected_arrivals(arrival: Any, duration: float) -> float:
    """Expected open-loop arrivals in ``[0, duration)`` seconds."""
    kind = arrival.type
    if kind in ("poisson", "gamma", "constant"):
        return arrival.rate * duration + 1.0
    if kind == "piecewise":
        total, start = 0.0, 0.0
        for segment in arrival.segments:
            end = duration if segment.until_s is None else min(segment.until_s, duration)
            if end > start:
                total += segment.rate * (end - start)
            start = max(start, end)
        last = arrival.segments[-1]  # its rate holds forever
        if last.until_s is not None and last.until_s < duration:
            total += last.rate * (duration - last.until_s)
        return total + 1.0
    return 0.0  # burst needs num_requests


def _decode_step_s(resolved: Any, batch: int, context: float) -> float:
    """Seconds of one decode step of ``batch`` requests of ``context`` tokens each."""
    try:
        t = resolved.latency_model.decode_step_times(
            np.array([batch], dtype=np.int64), np.array([int(batch * context)], dtype=np.int64)
        )[0]
    except (AttributeError, TypeError, ValueError):  # no vectorized formula: assume 1 ms
        return 1e-3
    return float(t) if t > 0 else 1e-3


def _trace_lengths(table: Any, limit: int) -> tuple[float, float, float, float]:
    """(requests, decode tokens, mean capped output, mean context) of a trace."""
    prompts = np.asarray(table.prompt_tokens, dtype=np.float64)
    outputs = np.asarray(table.output_tokens, dtype=np.float64)
    accepted = prompts < limit
    decode = np.where(accepted, np.minimum(outputs, limit - prompts), 0.0)
    n_accepted = int(accepted.sum())
    total = float(decode.sum())
    if n_accepted == 0:
        return float(len(prompts)), 0.0, 0.0, 0.0
    mean_decode = total / n_accepted
    context = float((prompts[accepted] + decode[accepted]).mean())
    return float(len(prompts)), total, mean_decode, context


def _synthetic_lengths(resolved: Any, limit: int) -> tuple[float, float, float, float]:
    """(requests, decode tokens, mean capped output, mean context) of a synthetic spec."""
    workload = resolved.workload
    spec = workload.workload_spec
    prompt_sampler, output_sampler, turns_sampler = workload.samplers
    prompt = prompt_sampler.mean()
    output = output_sampler.mean()
    if spec.shared_prefix is not None:
        prompt += spec.shared_prefix.fraction * spec.shared_prefix.prefix_len
    if spec.prompt_pool is not None and spec.prompt_pool.groups is not None:
        prompt += spec.prompt_pool.groups.system_prompt_len
    if turns_sampler is not None:
        prompt += (max(turns_sampler.mean(), 1.0) - 1.0) / 2.0 * (prompt + output)
    if spec.max_model_len is not None:
        limit = min(limit, spec.max_model_len + 1)
    rejected = prompt >= limit  # on average: rejected unseen, no work
    decode = 0.0 if rejected else min(output, limit - prompt)
    context = 0.0 if rejected else prompt + decode
    requests = sum(_stage_requests(resolved, st, decode, context) for st in spec.all_stages)
    return requests, requests * decode, decode, context


def _stage_requests(resolved: Any, stage: Any, decode: float, context: float) -> float:
    """Requests one stage (a workload without stages: the workload) sends."""
    if stage.num_requests is not None:
        return float(stage.num_requests)
    if stage.arrival.type == "closed_loop":
        arrival = stage.arrival
        batch = max(1, min(arrival.concurrency, resolved.max_num_seqs))
        busy = max(decode, 1.0) * _decode_step_s(resolved, batch, context / 2.0)
        return arrival.concurrency * stage.duration_s / (arrival.think_time_s + busy) + 1.0
    return _expected_arrivals(stage.arrival, stage.duration_s)


def estimate_work(resolved: Any) -> WorkEstimate:
    """The work a resolved run implies (see the module docstring)."""
    limit = resolved.max_model_len
    table = getattr(resolved.workload, "table", None)
    if table is not None:
        requests, decode_tokens, decode, context = _trace_lengths(table, limit)
    elif hasattr(resolved.workload, "workload_spec"):
        requests, decode_tokens, decode, context = _synthetic_lengths(resolved, limit)
    else:  # a workload of unknown shape: nothing to estimate
        return WorkEstimate(0.0, 0.0, 0.0, 0.0, 0.0)
    block_size = resolved.engine.block_size
    kv_tokens = float(resolved.num_gpu_blocks * block_size)
    fits = kv_tokens / context if context > 0 else float("inf")
    in_flight = max(1.0, min(float(resolved.max_num_seqs), requests, fits))
    steps = max(decode_tokens / in_flight, decode)
    crowded = min(requests, float(resolved.max_num_seqs)) * context > kv_tokens
    checks = steps * context / block_size if crowded else 0.0
    memory = requests * BYTES_PER_REQUEST + in_flight * context * BYTES_PER_TOKEN_IN_FLIGHT
    return WorkEstimate(requests, decode_tokens, steps, checks, memory)


def _n(value: float) -> str:
    """``1.3e+06``-style for big numbers, digits with separators below a million."""
    return f"{value:,.0f}" if value < 1e6 else f"{value:.2g}"


def _source(resolved: Any) -> str:
    """The workload file (or preset) as the user named it, for the message."""
    config = resolved.workload_config
    source = str(config.get("trace") or config.get("source") or resolved.workload_name)
    return source.removeprefix("preset:")


def check_work_bounds(
    resolved: Any, *, allow_large: bool | None = None, source: str | None = None
) -> None:
    """Raise ValueError (one line naming the workload ``source``, the estimate, the
    limits passed and the opt-in) when the run passes a limit of this module;
    ``allow_large`` None reads ``KVSIM_ALLOW_LARGE`` (``1`` allows)."""
    if allow_large is None:
        allow_large = os.environ.get(ENV_ALLOW, "") == "1"
    if allow_large:
        return
    est = estimate_work(resolved)
    passed = [
        (est.requests > MAX_REQUESTS, f"{_n(est.requests)} requests > {_n(MAX_REQUESTS)}"),
        (
            est.decode_tokens > MAX_DECODE_TOKENS,
            f"{_n(est.decode_tokens)} decode tokens > {_n(MAX_DECODE_TOKENS)}",
        ),
        (
            est.block_checks > MAX_BLOCK_CHECKS,
            f"{_n(est.block_checks)} prefix-cache block checks by waiting requests > "
            f"{_n(MAX_BLOCK_CHECKS)} (requests of ~{_n(est.decode_tokens / max(est.requests, 1))}"
            " decode tokens do not fit in the KV cache together)",
        ),
        (
            est.memory_bytes > MAX_MEMORY_BYTES,
            f"{est.memory_bytes / 2**30:,.1f} GiB of memory > {MAX_MEMORY_BYTES // 2**30} GiB",
        ),
    ]
    over = [text for hit, text in passed if hit]
    if not over:
        return
    minutes = est.seconds() / 60.0
    memory = est.memory_bytes / 2**30
    shown = f"{memory:,.1f} GiB" if memory >= 1 else f"{est.memory_bytes / 2**20:,.0f} MiB"
    raise ValueError(
        f"{source or _source(resolved)}: work: too large to simulate: about {_n(est.requests)} "
        f"requests, {_n(est.decode_tokens)} decode tokens (each output counted up to "
        f"max_model_len {resolved.max_model_len:,}, as vLLM caps it), at least "
        f"{_n(est.engine_steps)} engine steps, {shown} of memory, ~{_n(minutes)} minutes "
        f"({'; '.join(over)}); shrink the workload, or set {ENV_ALLOW}=1 to run it anyway"
    )
