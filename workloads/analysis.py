"""Closed-form expectations of a spec, to check simulated results against."""

from __future__ import annotations

from pathlib import Path

from workloads.distributions import make_sampler
from workloads.spec import WorkloadSpec


def expected_prefix_hit_fraction(
    spec: WorkloadSpec,
    *,
    block_size: int = 16,
    num_requests: int | None = None,
    base_dir: Path | str = ".",
) -> float:
    """Expected prefix-cache hit rate (hit tokens / queried prompt tokens) of a spec.

    Assumes a prefix cache that never evicts a shared-prefix block, and requests whose
    own tokens never repeat (they are random). With N requests, prefix fraction f,
    group probabilities p_g, prefix length P, block size B and mean own prompt
    length L:

    - a request uses group g with probability f * p_g, so the expected number of groups
      ever used (each group's first request misses) is D = sum_g 1 - (1 - f p_g)^N;
    - every other prefix request hits the prefix's full blocks, H = floor(P / B) * B
      tokens (vLLM caches full blocks only; the prompt is longer than P, so the
      "recompute the last token" rule never cuts into them);
    - hit fraction = (f N - D) * H / (N * (f P + L)).

    Single-turn specs only (in sessions every turn also hits its own history).

    Args:
        spec: the workload spec.
        block_size: KV cache block size in tokens (vLLM's ``--block-size``).
        num_requests: N; default the spec's ``num_requests``.
        base_dir: where an ``empirical`` prompt-length file is found.
    """
    if spec.sessions is not None:
        raise ValueError("expected_prefix_hit_fraction covers single-turn specs only")
    total = num_requests if num_requests is not None else spec.num_requests
    if total is None or total <= 0:
        raise ValueError("give num_requests for a duration-bound spec")
    own = make_sampler(spec.prompt_len, Path(base_dir), "<spec>", "prompt_len").mean()
    prefix = spec.shared_prefix
    if prefix is None or prefix.fraction == 0:
        return 0.0
    f, length = prefix.fraction, prefix.prefix_len
    distinct = sum(1.0 - (1.0 - f * p) ** total for p in prefix.probabilities())
    hit_tokens = (length // block_size) * block_size
    return (f * total - distinct) * hit_tokens / (total * (f * length + own))
