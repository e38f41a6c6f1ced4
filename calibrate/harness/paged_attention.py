"""Paged attention over a block-table KV cache: the interface and the torch reference.

Layout (as vLLM V1, FlashAttention and FlashInfer NHD use): ``k_cache`` and ``v_cache``
are ``[num_blocks, block_size, num_kv_heads, head_size]``; ``block_table`` is int32
``[num_seqs, max_blocks_per_seq]`` of physical block ids; ``seq_lens`` (int32
``[num_seqs]``) counts each sequence's tokens in the cache *including* the ones computed
in this step (their K/V already written); ``query_start_loc`` (int32 ``[num_seqs + 1]``)
gives each sequence's rows of ``q`` (``[num_query_tokens, num_heads, head_size]``), so
prefill chunks (many rows) and decodes (one row) mix in one batch. Query row ``i`` of a
sequence with ``q_len`` rows sits at position ``seq_len - q_len + i`` and attends
causally to keys ``0..position`` (the last ``sliding_window`` of them when given).
GQA: query head ``h`` reads KV head ``h // (num_heads // num_kv_heads)``.

Backends: ``torch`` (gather through the block table + softmax; any device and dtype) and
``triton`` (``calibrate.harness.triton_attention``). torch is imported lazily by callers; this
module itself imports it at import time, so only harness code imports it.
"""

from __future__ import annotations

import torch

BACKENDS = ("torch", "triton")
QUERY_TILE = 128  # query rows per reference tile


def write_kv(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Store ``key``/``value`` (``[tokens, num_kv_heads, head_size]``) in the cache at
    flat slots ``block_id * block_size + offset``; slots < 0 are skipped (padding)."""
    block_size = k_cache.shape[1]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    blocks, offsets = slots // block_size, slots % block_size
    k_cache[blocks, offsets] = key[keep].to(k_cache.dtype)
    v_cache[blocks, offsets] = value[keep].to(v_cache.dtype)


def paged_attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """Attention output ``[num_query_tokens, num_heads, head_size_v]`` in ``q``'s dtype,
    computed in fp32 by gathering each sequence's keys through its block table, in tiles
    of ``QUERY_TILE`` query rows (so its work follows the causal pair count)."""
    num_heads = q.shape[1]
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    out = torch.empty((q.shape[0], num_heads, v_cache.shape[3]), dtype=q.dtype, device=q.device)
    starts = query_start_loc.tolist()
    for s, seq_len in enumerate(seq_lens.tolist()):
        q0, q_len = starts[s], starts[s + 1] - starts[s]
        n_blocks = -(-seq_len // block_size)
        ids = block_table[s, :n_blocks].long()
        k_all = k_cache[ids].reshape(-1, num_kv_heads, k_cache.shape[3])
        v_all = v_cache[ids].reshape(-1, num_kv_heads, v_cache.shape[3])
        # query rows in tiles; each tile reads only the keys it can see (causal work)
        for t0 in range(0, q_len, QUERY_TILE):
            t1 = min(q_len, t0 + QUERY_TILE)
            p0, p1 = seq_len - q_len + t0, seq_len - q_len + t1  # positions of the tile
            k_lo = 0 if sliding_window is None else max(0, p0 - sliding_window + 1)
            k = k_all[k_lo:p1].float().repeat_interleave(group, dim=1)
            v = v_all[k_lo:p1].float().repeat_interleave(group, dim=1)
            qs = q[q0 + t0 : q0 + t1].float()  # [rows, num_heads, D]
            scores = torch.einsum("qhd,khd->hqk", qs, k) * scale
            q_pos = torch.arange(p0, p1, device=q.device)[:, None]
            k_pos = torch.arange(k_lo, p1, device=q.device)[None, :]
            mask = k_pos <= q_pos
            if sliding_window is not None:
                mask &= k_pos > q_pos - sliding_window
            probs = torch.softmax(scores.masked_fill(~mask[None], float("-inf")), dim=-1)
            out[q0 + t0 : q0 + t1] = torch.einsum("hqk,khd->qhd", probs, v).to(q.dtype)
    return out


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    backend: str = "torch",
    max_query_len: int | None = None,
) -> torch.Tensor:
    """Paged attention with ``backend`` (``torch`` or ``triton``); see the module
    docstring for shapes. ``max_query_len`` (rows of the longest sequence) saves the
    triton backend a device-to-host copy."""
    if backend == "torch":
        return paged_attention_reference(
            q, k_cache, v_cache, block_table, seq_lens, query_start_loc, scale, sliding_window
        )
    if backend == "triton":
        from calibrate.harness.triton_attention import triton_paged_attention

        return triton_paged_attention(
            q,
            k_cache,
            v_cache,
            block_table,
            seq_lens,
            query_start_loc,
            scale,
            sliding_window,
            max_query_len,
        )
    raise ValueError(f"attention backend: unknown {backend!r}; allowed: {', '.join(BACKENDS)}")
