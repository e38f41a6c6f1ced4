"""CUDA graph capture-size conformance: random engine settings, the sizes vLLM 0.33.0
sets (driver ``cudagraph`` mode, :mod:`sim.conformance.cudagraph_driver`) against
:func:`calibrate.cudagraph_sizes.capture_sizes`, which the step model pads steps to.

A case is ``[max_num_seqs, max_num_batched_tokens, compute_capability,
decode_query_len]``: batch limits from one request to over the platform's ceiling,
capabilities on both sides of data-centre Blackwell's larger ceiling, and uniform decode
query lengths of speculative decoding (1 + draft tokens)."""

from __future__ import annotations

from typing import Any

from calibrate.cudagraph_sizes import capture_sizes
from sim.conformance.generate import case_rng

_SEQS = (1, 2, 3, 5, 8, 16, 64, 100, 128, 200, 256, 300, 512, 1024)
_TOKENS = (16, 64, 100, 256, 300, 512, 1000, 2048, 8192)


def random_cudagraph_case(seed: int, index: int) -> list[Any]:
    """One case (see the module docstring); ``max_num_batched_tokens >= max_num_seqs``,
    as vLLM requires."""
    rng = case_rng(seed, index, stream=3)
    seqs = int(rng.choice(_SEQS))
    tokens = int(rng.choice([t for t in _TOKENS if t >= seqs]))  # 8192 >= every seqs
    capability = str(rng.choice(["8.0", "8.9", "9.0", "10.0", "12.0"]))
    return [seqs, tokens, capability, int(rng.choice([1, 1, 2, 3, 4, 5, 8]))]


def run_kvsim_cudagraph(case: list[Any]) -> list[int]:
    """kvsim's capture sizes of ``case``."""
    return list(capture_sizes(*case))
