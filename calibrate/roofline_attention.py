"""The roofline's attention geometry (:mod:`calibrate.roofline`): the layers of each
attention kind on one rank, the query-key pairs a chunk of new tokens costs (causal,
window-capped) and the KV tokens it reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from calibrate.model_spec import LayerKind, ModelSpec


@dataclass(frozen=True)
class _AttentionGroup:
    """Layers of one attention kind on one rank."""

    num_layers: int
    window: int | None
    kv_bytes_per_token: float  # per layer, this rank
    prefill_flops_per_pair: float  # per layer, this rank, per (query, key) pair
    decode_flops_per_pair: float


def _causal_pairs(q: np.ndarray, c: np.ndarray, window: int | None) -> np.ndarray:
    """Query-key pairs of a causal chunk of ``q`` tokens on ``c`` cached ones, each query
    seeing at most ``window`` keys: ``sum_{p=c+1}^{c+q} min(p, W)``."""
    a, b = c + 1.0, c + q
    full = q * (a + b) / 2.0
    if window is None:
        return full
    w = float(window)
    straddle = (a + w) * (w - a + 1.0) / 2.0 + (b - w) * w
    return np.where(b <= w, full, np.where(a > w, q * w, straddle))


def prefill_pairs(q: np.ndarray, c: np.ndarray, window: int | None, kappa: float) -> float:
    """Query-key pairs a prefill phase costs: every chunk's causal pairs, its triangle on
    itself (the pairs of the chunk at ``c = 0``) weighted ``kappa`` instead of 1."""
    pairs = float(_causal_pairs(q, c, window).sum())
    triangle = float(_causal_pairs(q, np.zeros_like(c), window).sum())
    return pairs + (kappa - 1.0) * triangle


def _kv_reach(q: np.ndarray, c: np.ndarray, window: int | None) -> np.ndarray:
    """KV tokens a chunk of ``q`` new tokens on ``c`` cached ones reads per layer: all
    ``c + q``, or with a sliding window ``W`` the last ``W + q - 1`` at most."""
    return c + q if window is None else np.minimum(c + q, window + q - 1)


def decode_kv_tokens(
    g: _AttentionGroup,
    b: np.ndarray,
    k: np.ndarray,
    windowed_context: Mapping[int, np.ndarray] | None,
) -> np.ndarray:
    """KV tokens one decode step reads per layer of group ``g`` (= query-key pairs):
    ``K + B`` for ``B`` requests on ``K`` context tokens in total; for a sliding window
    ``W``, the given windowed total, else the bound ``min(K + B, B * W)``."""
    tokens = k + b
    if g.window is not None:
        given = None if windowed_context is None else windowed_context.get(g.window)
        if given is None:
            tokens = np.minimum(tokens, b * g.window)
        else:
            tokens = np.asarray(given, dtype=np.float64).reshape(-1)
    return tokens


def attention_groups(model: ModelSpec, tp: int, kv_cache_dtype: str) -> list[_AttentionGroup]:
    """One :class:`_AttentionGroup` per layer kind the model has (full, sliding window,
    MLA), its heads split ``tp`` ways: the KV bytes per token of its layers and the
    FLOPs per query-key pair of prefill and decode (MLA decode in the absorbed latent
    space)."""
    heads = model.num_attention_heads / tp
    groups = []
    kinds: tuple[LayerKind, ...] = ("full", "sliding_window", "mla")
    for kind in kinds:
        n = model.num_layers_of(kind)
        if not n:
            continue
        kv = model.kv_bytes_per_token_of(kind, kv_cache_dtype, tp)
        if kind == "mla":
            assert model.kv_lora_rank is not None and model.v_head_dim is not None
            prefill = 2.0 * heads * (model.mla_qk_head_size + model.v_head_dim)
            decode = 2.0 * heads * (model.mla_kv_size + model.kv_lora_rank)
        else:
            prefill = decode = 4.0 * heads * model.head_size
        window = model.sliding_window if kind == "sliding_window" else None
        groups.append(_AttentionGroup(n, window, kv, prefill, decode))
    return groups
