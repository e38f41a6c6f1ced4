"""kvsim's own Triton paged-attention kernel: prefill chunks and decodes in one launch.

Same interface and layout as ``calibrate.harness.paged_attention`` (cache ``[num_blocks,
block_size, num_kv_heads, head_size]``, block tables, ``seq_lens``, ``query_start_loc``).
One program handles one sequence, one KV head and a tile of ``BLOCK_Q`` query tokens
times the ``GROUP`` query heads sharing that KV head (GQA), i.e. ``BLOCK_M = BLOCK_Q *
GROUP`` rows, so each K/V block is read once per group and both products are ``tl.dot``
calls. It walks the sequence's KV blocks through the block table with an online
softmax in fp32 (causal, optional sliding window).

On a CPU, set ``TRITON_INTERPRET=1`` *before* importing this module (triton reads it when
the kernel is decorated). The interpreter cannot ``tl.dot`` bfloat16 operands
(triton-lang/triton#11584), so under the interpreter the operands are upcast to fp32.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@triton.jit
def _paged_attention_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    block_table_ptr,
    seq_lens_ptr,
    query_start_ptr,
    scale,
    stride_qt,
    stride_qh,
    stride_kb,
    stride_kt,
    stride_kh,
    stride_vb,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    stride_bt,
    HEAD_SIZE: tl.constexpr,
    HEAD_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    GROUP: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    WINDOW: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """One program of paged attention: one sequence, one KV head (its group of query
    heads) and one tile of its query tokens; loads the tile's queries, walks the KV
    blocks of the block table the tile can see (causal, and within ``WINDOW`` when
    set) with an online softmax, and stores the output.

    Why long: it is one Triton kernel; it reads best whole, beside the torch reference
    it is tested against."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    first = tl.program_id(2) * BLOCK_Q
    q_start = tl.load(query_start_ptr + seq)
    q_len = tl.load(query_start_ptr + seq + 1) - q_start
    if first >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    context = seq_len - q_len

    rows = tl.arange(0, BLOCK_M)
    tok = first + rows // GROUP
    head = kv_head * GROUP + rows % GROUP
    row_ok = (rows < BLOCK_Q * GROUP) & (tok < q_len)
    d = tl.arange(0, HEAD_PAD)
    d_ok = d < HEAD_SIZE
    q_offs = (q_start + tok)[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :]
    q = tl.load(q_ptr + q_offs, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    pos = context + tok

    kv_end = context + tl.minimum(first + BLOCK_Q, q_len)  # keys the tile can see
    num_blocks = tl.cdiv(kv_end, BLOCK_SIZE)
    start_block = 0
    if WINDOW > 0:
        start_block = tl.maximum(context + first - WINDOW + 1, 0) // BLOCK_SIZE

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_PAD], tl.float32)
    n = tl.arange(0, BLOCK_SIZE)
    for j in range(start_block, num_blocks):
        block = tl.load(block_table_ptr + seq * stride_bt + j).to(tl.int64)
        k_pos = j * BLOCK_SIZE + n
        kv_ok = k_pos < kv_end
        load_mask = kv_ok[:, None] & d_ok[None, :]
        k_offs = block * stride_kb + n[:, None] * stride_kt + kv_head * stride_kh + d[None, :]
        k = tl.load(k_ptr + k_offs, mask=load_mask, other=0.0)
        v_offs = block * stride_vb + n[:, None] * stride_vt + kv_head * stride_vh + d[None, :]
        v = tl.load(v_ptr + v_offs, mask=load_mask, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k)) * scale
        allowed = (k_pos[None, :] <= pos[:, None]) & kv_ok[None, :]
        if WINDOW > 0:
            allowed = allowed & (k_pos[None, :] > pos[:, None] - WINDOW)
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    o_offs = (q_start + tok)[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :]
    tl.store(
        out_ptr + o_offs,
        out.to(out_ptr.dtype.element_ty),
        mask=row_ok[:, None] & d_ok[None, :],
    )


def _tile_rows(group: int, max_query_len: int) -> int:
    """Rows (query tokens x heads of one group) per program: 16 for decode-only or tiny
    batches, 64 for prefill chunks; at least one full group."""
    rows = 16 if max_query_len * group <= 16 else 64
    return max(rows, triton.next_power_of_2(group))


def triton_paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    max_query_len: int | None = None,
) -> torch.Tensor:
    """Paged attention (see ``calibrate.harness.paged_attention``); returns ``[tokens, heads,
    head_size]`` in ``q``'s dtype. ``block_size`` must be a power of two >= 16; K and V
    share ``head_size``; the last dimension of q, caches and output must be contiguous."""
    num_tokens, num_heads, head_size = q.shape
    num_blocks, block_size, num_kv_heads, k_head = k_cache.shape
    if k_head != head_size or v_cache.shape != k_cache.shape:
        raise ValueError("triton backend: q, k_cache and v_cache need one head_size")
    if block_size < 16 or block_size & (block_size - 1):
        raise ValueError(
            f"triton backend: block_size must be a power of two >= 16, got {block_size}"
        )
    if num_heads % num_kv_heads:
        raise ValueError("num_heads must be a multiple of num_kv_heads")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:
            raise ValueError(f"triton backend: {name}'s last dimension must be contiguous")
    group = num_heads // num_kv_heads
    num_seqs = seq_lens.shape[0]
    if max_query_len is None:
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max().item())
    out = torch.empty_like(q)
    if num_tokens == 0 or num_seqs == 0:
        return out
    block_m = _tile_rows(group, max_query_len)
    block_q = block_m // group
    grid = (num_seqs, num_kv_heads, triton.cdiv(max_query_len, block_q))
    _paged_attention_kernel[grid](
        q,
        k_cache,
        v_cache,
        out,
        block_table,
        seq_lens,
        query_start_loc,
        float(scale),
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        out.stride(0),
        out.stride(1),
        block_table.stride(0),
        HEAD_SIZE=head_size,
        HEAD_PAD=max(16, triton.next_power_of_2(head_size)),
        BLOCK_SIZE=block_size,
        GROUP=group,
        BLOCK_Q=block_q,
        BLOCK_M=block_m,
        WINDOW=int(sliding_window or 0),
        UPCAST=INTERPRET or q.dtype == torch.float32,
    )
    return out
