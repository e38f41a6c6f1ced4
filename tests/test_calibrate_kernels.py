"""Paged attention: kvsim's Triton kernel (under TRITON_INTERPRET=1) against the torch
reference, and the random-weight model's forward on both backends."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported
torch = pytest.importorskip("torch", reason="torch not installed (calibrate extra)")

from calibrate.harness.paged_attention import paged_attention_reference  # noqa: E402


def _triton():
    pytest.importorskip("triton", reason="triton not installed")
    if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        pytest.skip("TRITON_INTERPRET was set to something else before this module loaded")
    from calibrate.harness.triton_attention import triton_paged_attention

    return triton_paged_attention


def _mixed_batch(dtype, q_heads=8, kv_heads=2, head=32, seed=0):
    """Decodes and prefill chunks (with and without cached context), scattered blocks."""
    g = torch.Generator().manual_seed(seed)
    num_blocks, bs = 48, 16
    k = torch.randn(num_blocks, bs, kv_heads, head, generator=g).to(dtype)
    v = torch.randn(num_blocks, bs, kv_heads, head, generator=g).to(dtype)
    seq_lens = [70, 19, 3, 97]  # query lengths 1, 19, 1, 40 (see qsl)
    perm = torch.randperm(num_blocks, generator=g)[:28].int()
    table = torch.zeros(4, 7, dtype=torch.int32)
    start = 0
    for i, n in enumerate(seq_lens):
        nb = -(-n // bs)
        table[i, :nb] = perm[start : start + nb]
        start += nb
    qsl = torch.tensor([0, 1, 20, 21, 61], dtype=torch.int32)
    q = torch.randn(61, q_heads, head, generator=g).to(dtype)
    return q, k, v, table, torch.tensor(seq_lens, dtype=torch.int32), qsl


@pytest.mark.parametrize(("dtype", "tol"), [("float32", 1e-5), ("float16", 2e-3)])
@pytest.mark.parametrize("window", [None, 24])
def test_triton_matches_reference(dtype, tol, window):
    kernel = _triton()
    q, k, v, table, lens, qsl = _mixed_batch(getattr(torch, dtype))
    ref = paged_attention_reference(q, k, v, table, lens, qsl, 0.17, window)
    out = kernel(q, k, v, table, lens, qsl, 0.17, window)
    assert out.dtype == q.dtype
    torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)


def test_reference_matches_dense_causal_attention():
    q, k, v, table, lens, qsl = _mixed_batch(torch.float32, q_heads=4, kv_heads=4)
    out = paged_attention_reference(q, k, v, table, lens, qsl, 0.2)
    # sequence 1: a 19-token prefill with no cache = plain causal attention
    n = 19
    keys = k[table[1, :2].long()].reshape(-1, 4, 32)[:n]
    vals = v[table[1, :2].long()].reshape(-1, 4, 32)[:n]
    dense = torch.nn.functional.scaled_dot_product_attention(
        q[1:20].transpose(0, 1), keys.transpose(0, 1), vals.transpose(0, 1),
        is_causal=True, scale=0.2,
    ).transpose(0, 1)  # fmt: skip
    torch.testing.assert_close(out[1:20], dense, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("model", ["llama", "gemma", "mla"])
def test_model_forward_same_on_both_backends(model):
    _triton()
    import numpy as np

    from calibrate.catalog import load_model
    from calibrate.harness.torch_runner import TorchRunner

    base = {"llama": "Llama-3.1-8B", "gemma": "Gemma-3-27B", "mla": "DeepSeek-V3"}[model]
    spec = load_model(base)
    tiny = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
            "num_kv_heads": min(spec.num_kv_heads, 2), "head_size": 16, "vocab_size": 128,
            "dtype": "float32"}  # fmt: skip
    if model == "mla":
        tiny |= {"kv_lora_rank": 32, "q_lora_rank": 48, "qk_nope_head_dim": 16,
                 "qk_rope_head_dim": 16, "v_head_dim": 16, "num_experts": 4,
                 "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                 "shared_expert_intermediate_size": 32, "first_k_dense_replace": 1}  # fmt: skip
    if model == "gemma":
        tiny |= {"sliding_window": 16}
    spec = spec.model_copy(update=tiny)
    outs = []
    for backend in ("torch", "triton"):
        runner = TorchRunner(spec, num_layers=2, attention_backend=backend)
        runner.load_weights()
        runner.allocate_kv(32)
        inputs = runner.make_step([1, 9, 1], [20, 5, 33], np.random.default_rng(0))
        hidden = runner.model(inputs.input_ids, inputs.positions, inputs.batch, runner.kv_caches)
        outs.append(hidden)
    torch.testing.assert_close(outs[0], outs[1], atol=1e-4, rtol=1e-4)
    assert {layer.kind for layer in runner.model.layers} >= (
        {"mla"} if model == "mla" else {"full"} if model == "llama" else {"sliding_window"}
    )
