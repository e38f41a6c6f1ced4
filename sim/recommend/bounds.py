"""Analytic bounds on one candidate, from its step-time model and KV budget alone.

Nothing here simulates. For a candidate (one replica: GPU, tensor-parallel size,
engine flags) and the workload's request lengths (:mod:`sim.recommend.sample`):

**Zero-load lower bounds** on each request's latencies, as if it were alone on the
replica: TTFT at least its prefill steps (chunks of ``max_num_batched_tokens``; with
prefix caching only its new tokens are computed), TPOT at least one decode step of
one request at its context, E2E at least both. Any SLO statistic (mean, p90, p99) of
these per-request bounds that is above the SLO cannot be met at any rate: the
candidate is infeasible without a simulation.

**Upper bounds on the request rate** one replica can serve (req/s); the least of
them bounds the max_rate search from above:

- ``tokens``: every step of ``n`` tokens takes at least the fastest step of ``n``
  tokens at zero context (``n`` split over 1, 2, 4, ... requests), so tokens per second
  are at most ``max_n n / t(n)`` over ``n <= max_num_batched_tokens``; each request
  costs its computed prompt tokens plus ``output - 1`` decodes.
- ``decode``: a step holds at most ``max_num_seqs`` decodes, and a step of ``d``
  decodes at their context takes at least ``t_dec(d)`` (each decode token reads at
  least its request's prompt: the decode-token-weighted mean prompt is the context).
- ``tpot`` (with a TPOT SLO ``T``): the decode-token-weighted mean step time is at
  most ``T`` when requests meet it, which caps the mean decode batch at the largest
  ``d`` with ``t_dec(d) <= T`` (exact for step times affine in the batch; a mean or
  p99 SLO lets some requests above ``T``, hence ``bound_slack``).
- ``kv``: by Little's law, rate times each request's block-seconds (its new tokens'
  blocks, held for at least ``output - 1`` of the fastest decode steps) is at most
  the replica's KV blocks.

The bound used is the least of these times ``bound_slack`` (>= 1: looser, never
tighter).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.app.setup import ResolvedRun
from sim.recommend.sample import LengthSample

STAT = {
    "ttft_mean_s": ("ttft", "mean"),
    "ttft_p90_s": ("ttft", 90),
    "tpot_mean_s": ("tpot", "mean"),
    "tpot_p99_s": ("tpot", 99),
    "e2e_p99_s": ("e2e", 99),
}
"""Each latency SLO's per-request quantity and statistic."""


@dataclass(frozen=True)
class Bounds:
    """What the analytic bounds say about one candidate.

    ``rate_limits``: each upper bound on the per-replica rate, req/s (``inf`` where it
    does not bind); ``rate_bound``: the least times the slack, req/s; ``binding``: the
    name of the least; ``zero_load``: each SLO's statistic of the per-request
    zero-load lower bounds, seconds; ``infeasible``: why the SLOs cannot be met (empty
    when they may be).
    """

    rate_limits: dict[str, float]
    rate_bound: float
    binding: str
    zero_load: dict[str, float]
    infeasible: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (an unbounded limit is ``null``)."""

        def num(x: float) -> float | None:
            return None if not math.isfinite(x) else float(x)

        return {
            "rate_limits": {k: num(v) for k, v in self.rate_limits.items()},
            "rate_bound": num(self.rate_bound),
            "binding": self.binding,
            "zero_load": {k: float(v) for k, v in self.zero_load.items()},
            "infeasible": list(self.infeasible),
        }


def _grid(top: int) -> list[int]:
    """1, 2, 4, ... up to ``top``, and ``top`` itself."""
    out, n = [], 1
    while n < top:
        out.append(n)
        n *= 2
    return [*out, top]


def fastest_step_s(latency: Any, n: int) -> float:
    """The fastest step of ``n`` tokens at zero context, over splits into 1, 2, 4, ...
    equal requests (seconds)."""
    best = math.inf
    for k in _grid(n):
        sizes = np.full(k, n // k, dtype=np.int64)
        sizes[: n % k] += 1
        best = min(best, float(latency.step_time(sizes, np.zeros(k, dtype=np.int64))))
    return best


def decode_step_s(latency: Any, batch: int, context_per_request: float) -> float:
    """One decode-only step of ``batch`` requests of ``context_per_request`` tokens each."""
    times = latency.decode_step_times(
        np.asarray([batch], dtype=np.int64),
        np.asarray([int(batch * context_per_request)], dtype=np.int64),
    )
    return float(times[0])


def _largest_batch_within(latency: Any, top: int, context: float, limit_s: float) -> int:
    """The largest decode batch ``<= top`` whose step takes at most ``limit_s`` (0 when
    even one request's does not)."""
    if decode_step_s(latency, 1, context) > limit_s:
        return 0
    lo, hi = 1, top
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if decode_step_s(latency, mid, context) <= limit_s else (lo, mid - 1)
    return lo


def zero_load_latencies(resolved: ResolvedRun, lengths: LengthSample) -> dict[str, np.ndarray]:
    """Per request, seconds: ``ttft``, ``tpot`` (requests of 2+ output tokens) and
    ``e2e`` lower bounds, alone on the replica."""
    latency = resolved.latency_model
    engine = resolved.engine
    chunk = resolved.max_num_batched_tokens if engine.enable_chunked_prefill else 1 << 62
    computed = lengths.new if engine.enable_prefix_caching else lengths.prompt
    cached = lengths.prompt - computed
    memo: dict[tuple[int, int], float] = {}
    ttft = np.empty(len(computed))
    for i, (todo, ctx) in enumerate(zip(computed.tolist(), cached.tolist())):
        key = (todo, ctx)
        if key not in memo:
            total, done = 0.0, 0
            while done < todo:
                step = min(chunk, todo - done)
                total += float(latency.step_time(np.asarray([step]), np.asarray([ctx + done])))
                done += step
            memo[key] = total
        ttft[i] = memo[key]
    ones = np.ones(len(lengths.prompt), dtype=np.int64)
    per_step = np.asarray(latency.decode_step_times(ones, lengths.prompt + 1), dtype=float)
    decodes = lengths.output - 1
    e2e = ttft + decodes * per_step
    return {"ttft": ttft, "tpot": per_step[decodes > 0], "e2e": e2e}


def _statistic(values: np.ndarray, stat: str | int) -> float:
    if not len(values):
        return 0.0
    return float(values.mean()) if stat == "mean" else float(np.percentile(values, stat))


def candidate_bounds(
    resolved: ResolvedRun,
    lengths: LengthSample,
    slo: dict[str, float],
    bound_slack: float,
) -> Bounds:
    """The bounds of one resolved candidate (see the module docstring); ``lengths``
    already cut to its ``max_model_len`` (:meth:`LengthSample.within`)."""
    latency = resolved.latency_model
    engine = resolved.engine
    seqs, mbt = resolved.max_num_seqs, resolved.max_num_batched_tokens
    computed = lengths.new if engine.enable_prefix_caching else lengths.prompt
    decodes = np.maximum(lengths.output - 1, 0).astype(float)
    mean_decodes = float(decodes.mean()) if len(decodes) else 0.0
    weighted_prompt = (
        float((decodes * lengths.prompt).sum() / decodes.sum()) if decodes.sum() else 0.0
    )

    zero = zero_load_latencies(resolved, lengths)
    zero_load, infeasible = {}, []
    for key, bound in slo.items():
        if key not in STAT:
            continue
        quantity, stat = STAT[key]
        value = _statistic(zero[quantity], stat)
        zero_load[key] = value
        if value > bound:
            infeasible.append(f"{key} is at least {value:.4g} s at zero load (SLO {bound:g})")

    limits: dict[str, float] = {}
    per_token_rate = max(n / fastest_step_s(latency, n) for n in _grid(mbt))
    work = float((computed + decodes).mean()) if len(computed) else 0.0
    limits["tokens"] = per_token_rate / work if work > 0 else math.inf
    if mean_decodes > 0:
        decode_rate = max(d / decode_step_s(latency, d, weighted_prompt) for d in _grid(seqs))
        limits["decode"] = decode_rate / mean_decodes
        tpot = [slo[k] for k in ("tpot_mean_s", "tpot_p99_s") if k in slo]
        if tpot:
            batch = _largest_batch_within(latency, seqs, weighted_prompt, min(tpot))
            if batch == 0:
                limits["tpot"] = 0.0
            else:
                step = decode_step_s(latency, batch, weighted_prompt)
                limits["tpot"] = batch / step / mean_decodes
        fastest = decode_step_s(latency, 1, 0)
        held = np.ceil((computed + 1) / engine.block_size)
        block_seconds = float((held * decodes).mean()) * fastest
        usable = resolved.num_gpu_blocks - 1
        limits["kv"] = usable / block_seconds if block_seconds > 0 else math.inf
    binding = min(limits, key=lambda k: limits[k])
    return Bounds(
        rate_limits=limits,
        rate_bound=limits[binding] * bound_slack,
        binding=binding,
        zero_load=zero_load,
        infeasible=infeasible,
    )
