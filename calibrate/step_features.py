"""Roofline-shaped basis terms of one engine step (pure numpy): what the fit weighs.

For a step with prefill chunks (``q_i`` new tokens on ``c_i`` cached) and decodes
(context ``k_j``), on one tensor-parallel rank, with the roofline model's shapes at
efficiency 1 (``calibrate.roofline``) and the hardware's nominal peaks ``F`` (FLOP/s)
and ``BW`` (bytes/s):

* ``const``: 1 (per-step fixed cost, seconds);
* ``dense``: ``max(weight_bytes / BW, GEMM FLOPs / F)`` (seconds; LM head included);
* ``prefill_attn``: causal query-key pairs of prefill chunks (each chunk's triangle on
  itself weighted as the roofline weighs it) x FLOPs per pair / F, summed over layers
  (windows cap the pairs);
* ``prefill_kv``: KV tokens prefill chunks read x KV bytes per token / BW, over layers;
* ``decode_kv``: KV tokens decodes read x KV bytes per token / BW, over layers;
* ``requests``: scheduled requests (count);
* ``attn_phases``: attention layers x phases present (prefill, decode), a kernel floor;
* ``allreduce``: the TP all-reduce time (0 at TP 1).

Fitted coefficients are thus dimensionless for the time terms and seconds per item for
the counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from calibrate.gpu_spec import GPUSpec
from calibrate.model_spec import ModelSpec
from calibrate.roofline import (
    RooflineEfficiency,
    RooflineLatencyModel,
    _kv_reach,
    decode_kv_tokens,
    prefill_pairs,
)

FEATURES = (
    "const",
    "dense",
    "prefill_attn",
    "prefill_kv",
    "decode_kv",
    "requests",
    "attn_phases",
    "allreduce",
)
_UNIT = RooflineEfficiency(1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0)


class StepFeatures:
    """Computes ``FEATURES`` for steps of ``model`` on hardware ``gpu`` (nominal peaks)."""

    def __init__(
        self, model: ModelSpec, gpu: GPUSpec, tp: int = 1, kv_cache_dtype: str = "auto"
    ) -> None:
        self.rf = RooflineLatencyModel(model, gpu, tp, _UNIT, kv_cache_dtype)

    def step(self, new_tokens: Sequence[int], context_tokens: Sequence[int]) -> np.ndarray:
        """The feature vector of one step (requests with 0 new tokens are ignored)."""
        new = np.asarray(new_tokens, dtype=np.float64)
        ctx = np.asarray(context_tokens, dtype=np.float64)
        keep = new > 0
        new, ctx = new[keep], ctx[keep]
        out = np.zeros(len(FEATURES))
        if not new.size:
            return out
        rf = self.rf
        n_tok, n_req = new.sum(), float(new.size)
        out[0] = 1.0
        out[1] = float(rf._dense_time(np.float64(n_tok), np.float64(n_req)))
        out[5] = n_req
        out[7] = float(rf._allreduce_time(np.float64(n_tok), np.float64(n_req)))
        is_dec = new == 1
        for g in rf.groups:
            for decode in (False, True):
                sel = is_dec if decode else ~is_dec
                if not sel.any():
                    continue
                q, c = new[sel], ctx[sel]
                reach = _kv_reach(q, c, g.window)
                kv = g.num_layers * reach.sum() * g.kv_bytes_per_token / rf.bytes_per_s
                out[6] += g.num_layers
                if decode:
                    out[4] += kv
                else:
                    pairs = prefill_pairs(q, c, g.window, rf.eff.prefill_causal_weight)
                    out[2] += g.num_layers * pairs * g.prefill_flops_per_pair / rf.attn_flops_per_s
                    out[3] += kv
        return out

    def matrix(self, steps: Sequence[tuple[Sequence[int], Sequence[int]]]) -> np.ndarray:
        """``[len(steps), len(FEATURES)]`` for (new_tokens, context_tokens) pairs."""
        return np.array([self.step(n, c) for n, c in steps]).reshape(len(steps), len(FEATURES))

    def decode(
        self,
        batch_sizes: np.ndarray,
        total_context: np.ndarray,
        windowed_context: Mapping[int, np.ndarray] | None = None,
    ) -> np.ndarray:
        """Features of many decode-only steps (``B`` requests, ``K`` context tokens in
        total; see ``LatencyModel.decode_step_times``); equals ``step`` row by row when
        ``windowed_context`` gives the sliding windows' totals (else their bound)."""
        rf = self.rf
        b = np.asarray(batch_sizes, dtype=np.float64).reshape(-1)
        k = np.asarray(total_context, dtype=np.float64).reshape(-1)
        on = (b > 0).astype(np.float64)
        out = np.zeros((b.size, len(FEATURES)))
        out[:, 0] = on
        out[:, 1] = rf._dense_time(b, b) * on
        out[:, 5] = b
        out[:, 7] = rf._allreduce_time(b, b) * on
        for g in rf.groups:
            tokens = decode_kv_tokens(g, b, k, windowed_context)
            out[:, 4] += g.num_layers * tokens * g.kv_bytes_per_token / rf.bytes_per_s
            out[:, 6] += g.num_layers * on
        return out
