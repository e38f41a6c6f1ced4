"""A random-weight decoder built from a ``ModelSpec``: what the calibration harness runs.

Llama-style: token embedding, per layer RMSNorm -> attention -> residual -> RMSNorm ->
SwiGLU MLP (or a top-k mixture of experts) -> residual, final RMSNorm, untied LM head
(tied when the spec says so). Attention layers are GQA with neox-style RoPE, full or
sliding-window (Gemma-3's pattern comes from ``layer_types``; Gemma's extra norms and
soft-capping are left out: they do not change shapes, memory or the KV layout). MLA
layers (DeepSeek-V3) cache one latent vector of ``kv_lora_rank + qk_rope_head_dim`` per
token and run attention in the absorbed form (MQA over the latent: the cache serves as
both K and V, the output's first ``kv_lora_rank`` channels are projected per head).

Tensor parallelism builds rank 0's shard: heads, MLP width and vocabulary split ``tp``
ways (KV heads: at least one per rank). Shapes: ``input_ids``/``positions`` ``[tokens]``,
hidden states ``[tokens, hidden_size]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from calibrate.harness.paged_attention import paged_attention, write_kv
from calibrate.model_reduce import reduce_layers
from calibrate.model_spec import ModelSpec


@dataclass
class AttentionBatch:
    """Where this step's tokens go in the paged KV cache (see ``paged_attention``)."""

    block_table: torch.Tensor  # int32 [num_seqs, max_blocks]
    seq_lens: torch.Tensor  # int32 [num_seqs], cached + new tokens
    query_start_loc: torch.Tensor  # int32 [num_seqs + 1]
    slot_mapping: torch.Tensor  # int64 [tokens], flat cache slot of each new token
    max_query_len: int
    backend: str = "torch"


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float = 1e4) -> torch.Tensor:
    """Neox-style rotary embedding of ``x`` (``[tokens, heads, dim]``, dim even)."""
    half = x.shape[-1] // 2
    inv = theta ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions.float()[:, None] * inv[None, :]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def _attend(
    q: torch.Tensor,
    cache: tuple[torch.Tensor, torch.Tensor],
    batch: AttentionBatch,
    scale: float,
    window: int | None,
) -> torch.Tensor:
    return paged_attention(
        q,
        cache[0],
        cache[1],
        batch.block_table,
        batch.seq_lens,
        batch.query_start_loc,
        scale,
        window,
        batch.backend,
        batch.max_query_len,
    )


class Attention(nn.Module):
    """GQA attention, full or sliding-window, over a paged cache."""

    def __init__(self, spec: ModelSpec, tp: int, window: int | None) -> None:
        super().__init__()
        self.heads = spec.num_attention_heads // tp
        self.kv_heads = max(1, spec.num_kv_heads // tp)
        self.head_size, self.window = spec.head_size, window
        d, h = spec.head_size, spec.hidden_size
        bias = spec.attention_bias
        self.qkv = nn.Linear(h, (self.heads + 2 * self.kv_heads) * d, bias=bias)
        self.o_proj = nn.Linear(self.heads * d, h, bias=False)

    def cache_shape(self, num_blocks: int, block_size: int) -> tuple[int, ...]:
        return (num_blocks, block_size, self.kv_heads, self.head_size)

    def forward(self, x, positions, batch, cache):  # type: ignore[no-untyped-def]
        if batch is None:  # profiling run: attention skipped, as in vLLM
            return self.o_proj(x.new_zeros(x.shape[0], self.heads * self.head_size))
        d = self.head_size
        q, k, v = self.qkv(x).split([self.heads * d, self.kv_heads * d, self.kv_heads * d], -1)
        q = apply_rope(q.view(-1, self.heads, d), positions)
        k = apply_rope(k.view(-1, self.kv_heads, d), positions)
        write_kv(cache[0], cache[1], k, v.view(-1, self.kv_heads, d), batch.slot_mapping)
        out = _attend(q, cache, batch, d**-0.5, self.window)
        return self.o_proj(out.reshape(-1, self.heads * d))


class MLAttention(nn.Module):
    """Multi-head latent attention in the absorbed form (one latent 'KV head')."""

    def __init__(self, spec: ModelSpec, tp: int) -> None:
        super().__init__()
        assert spec.kv_lora_rank is not None and spec.v_head_dim is not None
        h, self.heads = spec.hidden_size, spec.num_attention_heads // tp
        self.nope, self.rope = spec.qk_nope_head_dim or 0, spec.qk_rope_head_dim or 0
        self.rank, self.v_dim = spec.kv_lora_rank, spec.v_head_dim
        qk = self.nope + self.rope
        if spec.q_lora_rank:
            self.q_proj: nn.Module = nn.Sequential(
                nn.Linear(h, spec.q_lora_rank, bias=False),
                RMSNorm(spec.q_lora_rank),
                nn.Linear(spec.q_lora_rank, self.heads * qk, bias=False),
            )
        else:
            self.q_proj = nn.Linear(h, self.heads * qk, bias=False)
        self.kv_a = nn.Linear(h, self.rank + self.rope, bias=False)
        self.kv_norm = RMSNorm(self.rank)
        self.kv_b = nn.Linear(self.rank, self.heads * (self.nope + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.heads * self.v_dim, h, bias=False)

    def cache_shape(self, num_blocks: int, block_size: int) -> tuple[int, ...]:
        return (num_blocks, block_size, 1, self.rank + self.rope)

    def forward(self, x, positions, batch, cache):  # type: ignore[no-untyped-def]
        if batch is None:
            return self.o_proj(x.new_zeros(x.shape[0], self.heads * self.v_dim))
        q = self.q_proj(x).view(-1, self.heads, self.nope + self.rope)
        q_nope, q_rope = q.split([self.nope, self.rope], -1)
        latent, k_rope = self.kv_a(x).split([self.rank, self.rope], -1)
        entry = torch.cat(
            (self.kv_norm(latent), apply_rope(k_rope[:, None, :], positions)[:, 0]), -1
        )[:, None, :]
        write_kv(cache[0], cache[1], entry, entry, batch.slot_mapping)
        w = self.kv_b.weight.view(self.heads, self.nope + self.v_dim, self.rank)
        q_lat = torch.einsum("thn,hnc->thc", q_nope, w[:, : self.nope])
        q_full = torch.cat((q_lat, apply_rope(q_rope, positions)), -1).contiguous()
        out = _attend(q_full, cache, batch, (self.nope + self.rope) ** -0.5, None)
        v = torch.einsum("thc,hvc->thv", out[..., : self.rank], w[:, self.nope :])
        return self.o_proj(v.reshape(-1, self.heads * self.v_dim))


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, hidden: int, width: int) -> None:
        super().__init__()
        self.gate_up = nn.Linear(hidden, 2 * width, bias=False)
        self.down = nn.Linear(width, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(nn.functional.silu(gate) * up)


class MoE(nn.Module):
    """Top-k routed experts (softmax over the chosen k) plus an optional shared expert."""

    def __init__(self, spec: ModelSpec, tp: int) -> None:
        super().__init__()
        h, width = spec.hidden_size, max(1, spec.moe_intermediate_size // tp)
        self.k = spec.num_experts_per_tok
        self.router = nn.Linear(h, spec.num_experts, bias=True)
        self.experts = nn.ModuleList(MLP(h, width) for _ in range(spec.num_experts))
        shared = spec.shared_expert_intermediate_size // tp
        self.shared = MLP(h, shared) if shared else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = self.router(x).float().topk(self.k, dim=-1)
        weights = weights.softmax(-1).to(x.dtype)
        out = self.shared(x) if self.shared is not None else torch.zeros_like(x)
        for e in chosen.unique().tolist():
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            out[rows] += weights[rows, slot, None] * self.experts[e](x[rows])
        return out


class DecoderLayer(nn.Module):
    def __init__(self, spec: ModelSpec, tp: int, index: int) -> None:
        super().__init__()
        kind = spec.layer_types[index]
        self.kind = kind
        self.input_norm = RMSNorm(spec.hidden_size)
        self.post_norm = RMSNorm(spec.hidden_size)
        if kind == "mla":
            self.attn: Attention | MLAttention = MLAttention(spec, tp)
        else:
            window = spec.sliding_window if kind == "sliding_window" else None
            self.attn = Attention(spec, tp, window)
        moe = spec.is_moe and index >= spec.first_k_dense_replace
        self.mlp = MoE(spec, tp) if moe else MLP(spec.hidden_size, spec.intermediate_size // tp)

    def forward(self, x, positions, batch, cache):  # type: ignore[no-untyped-def]
        x = x + self.attn(self.input_norm(x), positions, batch, cache)
        return x + self.mlp(self.post_norm(x))


class Decoder(nn.Module):
    """The whole model (one tensor-parallel rank's shard)."""

    def __init__(self, spec: ModelSpec, tp: int = 1) -> None:
        super().__init__()
        self.spec, self.tp = spec, tp
        vocab = -(-spec.vocab_size // tp)
        self.embed = nn.Embedding(vocab, spec.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(spec, tp, i) for i in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size)
        self.lm_head = (
            None if spec.tie_word_embeddings else nn.Linear(spec.hidden_size, vocab, bias=False)
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        batch: AttentionBatch | None = None,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """Final hidden states ``[tokens, hidden]``; ``batch=None`` skips attention."""
        x = self.embed(input_ids.clamp(max=self.embed.num_embeddings - 1))
        for i, layer in enumerate(self.layers):
            x = layer(x, positions, batch, None if kv_caches is None else kv_caches[i])
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """fp32 logits ``[rows, vocab / tp]`` (the LM head on the given rows)."""
        weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return (hidden @ weight.t()).float()

    def allocate_kv_caches(
        self, num_blocks: int, block_size: int, dtype: torch.dtype | None = None
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """One (K, V) pair per layer, ``[num_blocks, block_size, kv_heads, head]``;
        MLA layers share one latent tensor as K and V."""
        p = next(self.parameters())
        caches = []
        for layer in self.layers:
            shape = layer.attn.cache_shape(num_blocks, block_size)
            k = torch.randn(shape, dtype=dtype or p.dtype, device=p.device)
            v = k if layer.kind == "mla" else torch.randn_like(k)
            caches.append((k, v))
        return caches


def build_model(
    spec: ModelSpec,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    num_layers: int | None = None,
    tp: int = 1,
    seed: int = 0,
) -> Decoder:
    """A random-weight ``Decoder`` for ``spec`` (first ``num_layers`` layers if given) on
    ``device`` in ``dtype``; weights ~ N(0, 0.02), norms 1. ``device="meta"`` allocates
    nothing (for parameter counts)."""
    if num_layers is not None:
        spec = reduce_layers(spec, num_layers)
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # build in place: no fp32 copy of the weights
    try:
        with torch.device(device):
            model = Decoder(spec, tp)
    finally:
        torch.set_default_dtype(previous)
    if str(device) != "meta":
        with torch.no_grad():
            for name, param in model.named_parameters():
                if not name.endswith("norm.weight") and param.dim() > 1:
                    param.normal_(0.0, 0.02)
    return model.eval().requires_grad_(False)
