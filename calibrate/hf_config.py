"""Read a Hugging Face ``config.json`` into a ``ModelSpec``.

Only the keys that size weights, FLOPs and the KV cache are read; all others are ignored
(as transformers does for keys a config class does not know). Handles the key spellings
of the Llama, Qwen2/3, Mistral, Mixtral, Gemma-2/3 (``text_config``, ``layer_types`` or
``sliding_window_pattern``) and DeepSeek-V2/V3 (MLA, MoE) families.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from calibrate.model_spec import LayerKind, ModelSpec

# vLLM's dtype "auto" runs float32 checkpoints in bfloat16 on GPUs (ModelConfig._get_dtype).
_DTYPE_ALIASES = {"float32": "bfloat16", "float": "bfloat16", "half": "float16"}


class HFConfig(BaseModel):
    """The subset of a Hugging Face config this module reads (unknown keys ignored)."""

    model_config = ConfigDict(defer_build=True, extra="ignore")

    architectures: list[str] | None = None
    model_type: str = ""
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    intermediate_size: int = 0
    vocab_size: int
    max_position_embeddings: int | None = None
    torch_dtype: str | None = None
    dtype: str | None = None
    tie_word_embeddings: bool | None = None
    attention_bias: bool | None = None
    sliding_window: int | None = None
    use_sliding_window: bool | None = None
    sliding_window_pattern: int | None = None
    layer_types: list[str] | None = None
    # MoE spellings: DeepSeek (n_routed_experts), Mixtral (num_local_experts), Qwen (num_experts).
    n_routed_experts: int | None = None
    num_local_experts: int | None = None
    num_experts: int | None = None
    num_experts_per_tok: int | None = None
    moe_intermediate_size: int | None = None
    n_shared_experts: int | None = None
    shared_expert_intermediate_size: int | None = None
    first_k_dense_replace: int | None = None
    # MLA.
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    quantization_config: dict[str, Any] | None = None
    rope_scaling: dict[str, Any] | None = None
    rope_local_base_freq: float | None = None
    vision_config: dict[str, Any] | None = None


def _flatten(raw: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs (Gemma-3, Llama-4...) keep the language model in ``text_config``."""
    text = raw.get("text_config")
    if not isinstance(text, dict):
        return raw
    merged = {k: v for k, v in raw.items() if k != "text_config"}
    merged.update(text)
    for key in ("torch_dtype", "dtype", "tie_word_embeddings"):
        if key in raw and key not in text:
            merged[key] = raw[key]
    return merged


def _key(raw: dict[str, Any], key: str) -> str:
    """``key`` as the user wrote it: ``text_config.<key>`` when it came from there."""
    text = raw.get("text_config")
    return f"text_config.{key}" if isinstance(text, dict) and key in text else key


def _check_shape(cfg: HFConfig, raw: dict[str, Any]) -> None:
    """Refuse the head and size keys vLLM 0.33.0 cannot build a model from.

    Contract: returns None when the config is usable, else raises ValueError
    ``"<key>: <problem> (got <value>)"`` naming the ``config.json`` key
    (``text_config.<key>`` for multimodal configs). Checked:

    - ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``vocab_size``,
      ``max_position_embeddings``: required, >= 1 (vLLM divides by the head count, and
      sizes the embedding, the layers and ``max_model_len`` from the others);
    - ``num_key_value_heads``: absent or null means multi-head attention (one KV head
      per attention head, as transformers and vLLM read it); present, it must be >= 1
      and divide ``num_attention_heads`` (vLLM's attention layer asserts both; 0 makes
      its Llama attention divide by zero);
    - ``head_dim``: absent, null or 0 means ``hidden_size // num_attention_heads``
      (vLLM's ``head_dim or hidden_size // num_heads``); negative is refused.
    """
    positive = {
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.max_position_embeddings,
    }
    for key, value in positive.items():
        if value is None:  # only max_position_embeddings may be absent in HFConfig
            raise ValueError(f"{_key(raw, key)}: missing (the model's context length)")
        if value < 1:
            raise ValueError(f"{_key(raw, key)}: must be a positive integer (got {value})")
    kv = cfg.num_key_value_heads
    if kv is not None:
        where = _key(raw, "num_key_value_heads")
        if kv < 1:
            raise ValueError(
                f"{where}: must be a positive integer (got {kv}); leave it out or set it "
                "to null for multi-head attention"
            )
        if cfg.num_attention_heads % kv:
            raise ValueError(
                f"{where}: must divide num_attention_heads ({cfg.num_attention_heads}) "
                f"(got {kv}); allowed: a divisor of {cfg.num_attention_heads}"
            )
    if cfg.head_dim is not None and cfg.head_dim < 0:
        raise ValueError(
            f"{_key(raw, 'head_dim')}: must be a positive integer, or 0 / null for "
            f"hidden_size // num_attention_heads (got {cfg.head_dim})"
        )


# Families whose config.json leaves the local/global alternation to the model code:
# Gemma-2 windows the even layers (0-based) and attends globally on the odd ones
# (vLLM's ``Gemma2Attention``; transformers' ``Gemma2Config.layer_types``).
_DEFAULT_WINDOW_PATTERN = {"gemma2": 2}


def _layer_types(cfg: HFConfig) -> tuple[LayerKind, ...]:
    n = cfg.num_hidden_layers
    if cfg.kv_lora_rank is not None:
        return ("mla",) * n
    window = cfg.sliding_window
    if window is None or (cfg.max_position_embeddings and window >= cfg.max_position_embeddings):
        return ("full",) * n
    if cfg.layer_types is not None:
        if len(cfg.layer_types) != n:
            raise ValueError(f"layer_types has {len(cfg.layer_types)} entries, expected {n}")
        kinds: list[LayerKind] = []
        for t in cfg.layer_types:
            kinds.append("sliding_window" if "sliding" in t else "full")
        return tuple(kinds)
    pattern = cfg.sliding_window_pattern or _DEFAULT_WINDOW_PATTERN.get(cfg.model_type)
    if pattern:
        p = pattern  # every p-th layer (1-based) is global
        return tuple("full" if (i + 1) % p == 0 else "sliding_window" for i in range(n))
    if cfg.use_sliding_window is False:
        return ("full",) * n
    return ("sliding_window",) * n  # e.g. Mistral-7B-v0.1: every layer is windowed


def _vision_params(vision: dict[str, Any] | None, text_hidden: int) -> int:
    """Rough parameter count of a ViT-style vision tower plus its projector (weights
    only; vLLM loads it for multimodal checkpoints). Pixtral towers have a gated,
    three-matrix MLP (``PixtralMLP``: gate, up, down); SigLIP and CLIP towers two."""
    if not vision:
        return 0
    try:
        h = int(vision["hidden_size"])
        inter = int(vision.get("intermediate_size", 4 * h))
        layers = int(vision["num_hidden_layers"])
    except (KeyError, TypeError, ValueError):
        return 0
    mlp = 3 if vision.get("model_type") == "pixtral" else 2
    return layers * (4 * h * h + mlp * h * inter) + h * text_hidden


def _rope_cache_positions(cfg: HFConfig) -> int | None:
    """Rows of the rotary cos/sin caches vLLM builds, when not ``max_position_embeddings``:
    linear and dynamic-NTK scaling extend the cache by ``factor``
    (``LinearScalingRotaryEmbedding`` / ``DynamicNTKScalingRotaryEmbedding``); a separate
    local rope (Gemma-3's ``rope_local_base_freq`` for its sliding layers) adds one more
    cache of ``max_position_embeddings`` rows."""
    positions = cfg.max_position_embeddings or 0
    scaling = cfg.rope_scaling or {}
    kind = scaling.get("rope_type") or scaling.get("type")
    factor = scaling.get("factor")
    rows = positions
    if kind in ("linear", "dynamic") and isinstance(factor, (int, float)) and factor > 1:
        rows = int(positions * factor)
    if cfg.rope_local_base_freq is not None:
        rows += positions
    return rows if rows != positions else None


def _moe_fields(cfg: HFConfig) -> dict[str, int]:
    experts = cfg.n_routed_experts or cfg.num_local_experts or cfg.num_experts or 0
    if not experts:
        return {}
    moe_inter = cfg.moe_intermediate_size or cfg.intermediate_size
    shared = cfg.shared_expert_intermediate_size or (cfg.n_shared_experts or 0) * moe_inter
    return {
        "num_experts": experts,
        "num_experts_per_tok": cfg.num_experts_per_tok or 0,
        "moe_intermediate_size": moe_inter,
        "shared_expert_intermediate_size": shared,
        "first_k_dense_replace": cfg.first_k_dense_replace or 0,
    }


def _weight_format(quant: dict[str, Any] | None) -> dict[str, Any]:
    """How the decoder's linear weights are stored, as ``ModelSpec`` fields, from a
    ``quantization_config``; empty when unquantized or a scheme kvsim does not count.

    Counted: ``fp8`` checkpoints; GPTQ/AWQ (``bits`` 8: int8; 4: packed int4 with a
    16-bit scale per ``group_size``); ``compressed-tensors`` whose config groups all
    declare the same weight scheme (8-bit ``type`` float: fp8, int: int8; 4-bit int:
    packed, with its ``group_size``)."""
    if not quant:
        return {}
    method = quant.get("quant_method")
    if method == "fp8":
        return {"weight_dtype": "fp8"}
    if method in ("gptq", "awq"):
        bits, group = quant.get("bits"), quant.get("group_size")
    elif method == "compressed-tensors":
        schemes = set()
        for g in (quant.get("config_groups") or {}).values():
            w = (g.get("weights") or {}) if isinstance(g, dict) else {}
            schemes.add((w.get("num_bits"), w.get("type"), w.get("group_size")))
        if len(schemes) != 1:
            return {}
        bits, kind, group = schemes.pop()
        if bits == 8:
            return {"weight_dtype": "fp8" if kind == "float" else "int8"}
        if kind != "int":
            return {}
    else:
        return {}
    if bits == 8:
        return {"weight_dtype": "int8"}
    if bits == 4:
        size = group if isinstance(group, int) and group > 0 else None
        return {"weight_bits": 4, "weight_group_size": size}
    return {}


def model_spec_from_hf_config(raw: dict[str, Any], name: str) -> ModelSpec:
    """A ``ModelSpec`` named ``name`` from a parsed ``config.json``.

    Raises pydantic ``ValidationError`` (missing or mistyped keys) or ValueError
    (``"<key>: <problem>"``, see ``_check_shape``).
    """
    cfg = HFConfig.model_validate(_flatten(raw))
    _check_shape(cfg, raw)
    dtype = cfg.torch_dtype or cfg.dtype or "bfloat16"
    dtype = _DTYPE_ALIASES.get(dtype, dtype)
    gemma = cfg.model_type.startswith("gemma")
    tied = cfg.tie_word_embeddings if cfg.tie_word_embeddings is not None else gemma
    fields: dict[str, Any] = {
        "name": name,
        "architecture": (cfg.architectures or [cfg.model_type or "unknown"])[0],
        "num_layers": cfg.num_hidden_layers,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_attention_heads": cfg.num_attention_heads,
        "num_kv_heads": (
            cfg.num_attention_heads if cfg.num_key_value_heads is None else cfg.num_key_value_heads
        ),
        "head_size": cfg.head_dim or cfg.hidden_size // cfg.num_attention_heads,
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.max_position_embeddings,
        "dtype": dtype,
        **_weight_format(cfg.quantization_config),
        "tie_word_embeddings": tied,
        "attention_bias": bool(cfg.attention_bias) or cfg.model_type == "qwen2",
        "layer_types": _layer_types(cfg),
        "sliding_window": cfg.sliding_window,
        "extra_params": _vision_params(cfg.vision_config, cfg.hidden_size),
        "rope_cache_positions": _rope_cache_positions(cfg),
        **_moe_fields(cfg),
    }
    if cfg.kv_lora_rank is not None:
        fields.update(
            kv_lora_rank=cfg.kv_lora_rank,
            q_lora_rank=cfg.q_lora_rank,
            qk_nope_head_dim=cfg.qk_nope_head_dim or 0,
            qk_rope_head_dim=cfg.qk_rope_head_dim or 0,
            v_head_dim=cfg.v_head_dim,
            sliding_window=None,
        )
    if "sliding_window" not in fields["layer_types"]:
        fields["sliding_window"] = None
    return ModelSpec.model_validate(fields)


__all__ = ["HFConfig", "ValidationError", "model_spec_from_hf_config"]
