"""The EAGLE / EAGLE-3 draft head of a target model, as a model of its own: what its
weights, KV and forward passes cost (speculative decoding with ``method: eagle`` or
``eagle3``).

An EAGLE head is one decoder layer of the target's shape that reads the target's
hidden states: EAGLE fuses the token embedding with the last hidden state (a
``2h x h`` projection), EAGLE-3 fuses three of the target's hidden states (``3h x h``)
and predicts over a reduced draft vocabulary: 32,000 tokens against Llama 3's 128K in
the EAGLE-3 configuration of the ``speculators`` library (its ``draft_vocab_size``);
an assumption for other targets.
vLLM 0.33.0 loads it into the target's workers and gives its attention layer its own
KV cache beside the target's layers. The head shares the target's token embedding, so
only its output projection counts here (``tie_word_embeddings``). A mixture-of-experts
target gets a dense head with one expert's MLP width times the experts per token.
Units: parameters, tokens.
"""

from __future__ import annotations

from calibrate.model_spec import ModelSpec

EAGLE3_DRAFT_VOCAB = 32_000
"""Draft vocabulary of the public EAGLE-3 heads (tokens)."""

FUSED_HIDDEN_STATES = {"eagle": 2, "eagle3": 3}
"""Hidden states (or embeddings) an EAGLE head's input projection fuses."""


def eagle_head(target: ModelSpec, method: str) -> ModelSpec:
    """The draft head of ``target`` for ``method`` (``eagle`` or ``eagle3``)."""
    if method not in FUSED_HIDDEN_STATES:
        raise ValueError(f"not an EAGLE method: {method!r}")
    h = target.hidden_size
    width = target.intermediate_size
    if target.num_experts:
        width = target.moe_intermediate_size * max(1, target.num_experts_per_tok)
    vocab = target.vocab_size
    if method == "eagle3":
        vocab = min(vocab, EAGLE3_DRAFT_VOCAB)
    head_size = target.head_size
    if target.kv_lora_rank is not None:  # an MLA target: a head of plain attention
        head_size = target.v_head_dim or target.head_size
    return ModelSpec(
        **{
            **target.model_dump(),
            "name": f"{target.name} {method} head",
            "architecture": "EagleHead",
            "num_layers": 1,
            "intermediate_size": width,
            "head_size": head_size,
            "vocab_size": vocab,
            "tie_word_embeddings": True,
            "layer_types": ("full",),
            "sliding_window": None,
            "num_experts": 0,
            "num_experts_per_tok": 0,
            "moe_intermediate_size": 0,
            "shared_expert_intermediate_size": 0,
            "first_k_dense_replace": 0,
            "kv_lora_rank": None,
            "q_lora_rank": None,
            "qk_nope_head_dim": None,
            "qk_rope_head_dim": None,
            "v_head_dim": None,
            "extra_params": FUSED_HIDDEN_STATES[method] * h * h,
        }
    )
