"""A decoder-only transformer described by the numbers that size its weights, FLOPs and KV.

``ModelSpec`` is built from a Hugging Face ``config.json`` (``calibrate.hf_config``) and
feeds the KV budget (``kv_planning_kwargs`` / ``kv_layer_specs`` go to kvcore's planner,
which mirrors vLLM 0.33.0's ``get_kv_cache_configs``) and the roofline latency model
(``param_counts``). Units: sizes are elements, counts are parameters, bytes are bytes.

Layer kinds: ``full`` (global attention, a KV entry for every token), ``sliding_window``
(attends to the last ``sliding_window`` tokens), ``mla`` (multi-head latent attention:
one latent vector of ``kv_lora_rank + qk_rope_head_dim`` per token, shared by all heads).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvcore.kv_cache_budget import build_layer_specs
from kvcore.kv_cache_interface import KVCacheSpec, get_dtype_size

LayerKind = Literal["full", "sliding_window", "mla"]


class ParamCounts(NamedTuple):
    """Parameters by role (counts, not bytes); ``active_per_token`` counts the experts
    one token uses (top-k routed + shared) instead of all routed experts."""

    embedding: int
    lm_head: int
    attention: int
    dense_mlp: int
    moe_routed: int
    moe_shared: int
    router: int
    norms: int
    extra: int
    total: int
    active_per_token: int

    @property
    def linear(self) -> int:
        """Matmul weights inside the decoder layers (what fp8 quantization covers)."""
        return self.attention + self.dense_mlp + self.moe_routed + self.moe_shared


class ModelSpec(BaseModel):
    """Architecture numbers of one model (validated; unknown fields are rejected)."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    architecture: str = ""
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(ge=0, description="dense MLP width (elements)")
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_position_embeddings: int = Field(gt=0, description="tokens")
    dtype: str = "bfloat16"
    weight_dtype: str | None = None
    weight_bits: int | None = Field(
        default=None, ge=1, le=7, description="sub-byte linear weights (GPTQ/AWQ int4), bits"
    )
    weight_group_size: int | None = Field(
        default=None, gt=0, description="weights per 16-bit scale of sub-byte weights"
    )
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    layer_types: tuple[LayerKind, ...]
    sliding_window: int | None = Field(default=None, gt=0, description="tokens")
    # Mixture of experts (num_experts = 0: dense model).
    num_experts: int = Field(default=0, ge=0)
    num_experts_per_tok: int = Field(default=0, ge=0)
    moe_intermediate_size: int = Field(default=0, ge=0)
    shared_expert_intermediate_size: int = Field(default=0, ge=0)
    first_k_dense_replace: int = Field(default=0, ge=0)
    # Multi-head latent attention (DeepSeek-V2/V3).
    kv_lora_rank: int | None = Field(default=None, gt=0)
    q_lora_rank: int | None = Field(default=None, gt=0)
    qk_nope_head_dim: int | None = Field(default=None, ge=0)
    qk_rope_head_dim: int | None = Field(default=None, ge=0)
    v_head_dim: int | None = Field(default=None, gt=0)
    extra_params: int = Field(default=0, ge=0, description="e.g. a vision tower vLLM loads")
    rope_cache_positions: int | None = Field(
        default=None,
        gt=0,
        description="rows of all rotary cos/sin caches vLLM builds (None: max_position_embeddings)",
    )

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if len(self.layer_types) != self.num_layers:
            raise ValueError(
                f"layer_types has {len(self.layer_types)} entries, num_layers is {self.num_layers}"
            )
        if "sliding_window" in self.layer_types and self.sliding_window is None:
            raise ValueError("sliding_window (tokens) is required for sliding-window layers")
        if "mla" in self.layer_types and (self.kv_lora_rank is None or self.v_head_dim is None):
            raise ValueError("kv_lora_rank and v_head_dim are required for MLA layers")
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if self.num_experts and not (0 < self.num_experts_per_tok <= self.num_experts):
            raise ValueError("num_experts_per_tok must be in 1..num_experts for an MoE model")
        for field in ("dtype", "weight_dtype"):
            value = getattr(self, field)
            if value is not None and value not in _KNOWN_DTYPES:
                raise ValueError(f"{field}: unknown dtype {value!r}")
        return self

    # ---- layer structure -------------------------------------------------------------

    @property
    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """Attention kind of every layer, in order."""
        return self.layer_types

    def num_layers_of(self, kind: LayerKind) -> int:
        """How many layers are of ``kind``."""
        return sum(1 for k in self.layer_types if k == kind)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (all after ``first_k_dense_replace``)."""
        return (
            self.num_layers - min(self.first_k_dense_replace, self.num_layers) if self.is_moe else 0
        )

    @property
    def mla_kv_size(self) -> int:
        """Elements one MLA layer caches per token (latent + rope key); 0 without MLA."""
        return (self.kv_lora_rank or 0) + (self.qk_rope_head_dim or 0)

    @property
    def mla_qk_head_size(self) -> int:
        """Query/key width per head of an MLA layer (nope + rope), elements."""
        return (self.qk_nope_head_dim or 0) + (self.qk_rope_head_dim or 0)

    # ---- parameters and bytes ----------------------------------------------------------

    def _attention_params_per_layer(self, kind: LayerKind) -> int:
        h, nq, d = self.hidden_size, self.num_attention_heads, self.head_size
        if kind == "mla":
            assert self.kv_lora_rank is not None and self.v_head_dim is not None
            qk = self.mla_qk_head_size
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * nq * qk
            else:
                q = h * nq * qk
            kv_a = h * self.mla_kv_size + self.kv_lora_rank
            kv_b = self.kv_lora_rank * nq * ((self.qk_nope_head_dim or 0) + self.v_head_dim)
            return q + kv_a + kv_b + nq * self.v_head_dim * h
        qkv = h * (nq + 2 * self.num_kv_heads) * d
        bias = (nq + 2 * self.num_kv_heads) * d if self.attention_bias else 0
        return qkv + bias + nq * d * h

    def param_counts(self) -> ParamCounts:
        """Parameter counts by role (total and active per token); MTP layers excluded
        (vLLM loads them only for speculative decoding)."""
        h = self.hidden_size
        embedding = self.vocab_size * h
        lm_head = 0 if self.tie_word_embeddings else embedding
        attention = sum(self._attention_params_per_layer(k) for k in self.layer_types)
        n_moe = self.num_moe_layers
        dense_mlp = (self.num_layers - n_moe) * 3 * h * self.intermediate_size
        expert = 3 * h * self.moe_intermediate_size
        moe_routed = n_moe * self.num_experts * expert
        moe_shared = n_moe * 3 * h * self.shared_expert_intermediate_size
        router = n_moe * self.num_experts * (h + 1)
        norms = (2 * self.num_layers + 1) * h
        active_routed = n_moe * self.num_experts_per_tok * expert
        shared = embedding + lm_head + attention + dense_mlp + moe_shared + router + norms
        return ParamCounts(
            embedding=embedding,
            lm_head=lm_head,
            attention=attention,
            dense_mlp=dense_mlp,
            moe_routed=moe_routed,
            moe_shared=moe_shared,
            router=router,
            norms=norms,
            extra=self.extra_params,
            total=shared + moe_routed + self.extra_params,
            active_per_token=shared + active_routed,
        )

    @property
    def total_params(self) -> int:
        """All parameters vLLM loads (routed experts included)."""
        return self.param_counts().total

    @property
    def active_params(self) -> int:
        """Parameters one token passes through (top-k routed experts only)."""
        return self.param_counts().active_per_token

    def weight_bytes(self, dtype: str | None = None) -> int:
        """Bytes of all weights. ``dtype`` (default: the checkpoint's ``weight_dtype``,
        else ``dtype``) applies to the decoder's matmul weights; embeddings, norms and
        extra modules stay in the model dtype (as in fp8 checkpoints). Block scales of
        fp8 checkpoints (4 bytes per 128x128 block) are ignored. Without ``dtype``,
        ``weight_bits`` (sub-byte checkpoints) packs the matmul weights at that many bits
        plus one 16-bit scale per ``weight_group_size`` weights (every input row when
        unset), as GPTQ/AWQ store them."""
        counts = self.param_counts()
        other = counts.total - counts.linear
        other_bytes = other * get_dtype_size(self.dtype)
        if dtype is None and self.weight_bits is not None:
            group = self.weight_group_size or self.hidden_size
            packed = counts.linear * self.weight_bits // 8
            return packed + 2 * (counts.linear // group) + other_bytes
        linear_bytes = get_dtype_size(dtype or self.weight_dtype or self.dtype)
        return counts.linear * linear_bytes + other_bytes

    def routed_expert_bytes(self) -> int:
        """Bytes of the routed experts' weights (matmul weights, stored as
        :meth:`weight_bytes` stores them): what expert parallelism splits over ranks."""
        routed = self.param_counts().moe_routed
        if self.weight_bits is not None:
            group = self.weight_group_size or self.hidden_size
            return routed * self.weight_bits // 8 + 2 * (routed // group)
        return routed * get_dtype_size(self.weight_dtype or self.dtype)

    def weight_bytes_per_rank(self, tp: int = 1, dp: int = 1) -> int:
        """Weight bytes on one GPU: everything split ``tp`` ways, except that with data
        parallelism (``dp > 1``) an MoE model's routed experts are split over all
        ``dp * tp`` ranks, as vLLM's fused-MoE layer shards them (expert parallel or
        tensor parallel over the flattened group, ``FusedMoEParallelConfig.make``)."""
        total = self.weight_bytes()
        if dp == 1 or not self.num_experts:
            return total // tp
        routed = self.routed_expert_bytes()
        return (total - routed) // tp + routed // (tp * dp)

    # ---- KV cache ----------------------------------------------------------------------

    def kv_cache_dtype(self, kv_cache_dtype: str = "auto") -> str:
        """vLLM's ``--kv-cache-dtype``: ``auto`` means the model dtype."""
        return self.dtype if kv_cache_dtype == "auto" else kv_cache_dtype

    def kv_bytes_per_token(self, kv_cache_dtype: str = "auto", tp: int = 1) -> int:
        """KV bytes one token occupies on one tensor-parallel rank, over all layers
        (sliding-window layers counted as if the token were inside the window)."""
        return sum(
            self.kv_bytes_per_token_of(kind, kv_cache_dtype, tp) * self.num_layers_of(kind)
            for kind in ("full", "sliding_window", "mla")
        )

    def kv_bytes_per_token_of(
        self, kind: LayerKind, kv_cache_dtype: str = "auto", tp: int = 1
    ) -> int:
        """KV bytes one token occupies in one layer of ``kind`` on one rank. MLA caches
        are replicated on every rank; attention KV heads are split (at least 1 per rank)."""
        size = get_dtype_size(self.kv_cache_dtype(kv_cache_dtype))
        if kind == "mla":
            return self.mla_kv_size * size
        return 2 * max(1, self.num_kv_heads // tp) * self.head_size * size

    def kv_planning_kwargs(self, kv_cache_dtype: str = "auto") -> dict[str, object]:
        """Layer counts and shapes for ``kvcore.kv_cache_budget.plan_kv_cache_budget``
        (``num_kv_heads`` is the model's total; the planner splits it per rank)."""
        return {
            "num_full_layers": self.num_layers_of("full"),
            "num_sliding_window_layers": self.num_layers_of("sliding_window"),
            "num_mla_layers": self.num_layers_of("mla"),
            "num_kv_heads": self.num_kv_heads,
            "head_size": self.head_size,
            "dtype": self.kv_cache_dtype(kv_cache_dtype),
            "sliding_window": self.sliding_window if "sliding_window" in self.layer_types else None,
            "mla_head_size": self.mla_kv_size or None,
        }

    def kv_layer_specs(
        self, block_size: int = 16, kv_cache_dtype: str = "auto", tp: int = 1
    ) -> dict[str, KVCacheSpec]:
        """``{layer_name: KVCacheSpec}`` of one tensor-parallel rank, as vLLM's
        ``get_kv_cache_spec`` would report them (layer names are kvcore's)."""
        kwargs = self.kv_planning_kwargs(kv_cache_dtype)
        kwargs["num_kv_heads"] = max(1, self.num_kv_heads // tp)
        return build_layer_specs(block_size=block_size, **kwargs)  # type: ignore[arg-type]


_KNOWN_DTYPES = {"float32", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8"}
