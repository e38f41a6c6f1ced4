"""The estimated terms of the KV block budget (``calibrate.budget``), in bytes per
tensor-parallel rank, each mirroring one part of vLLM's start-up memory accounting.

Estimates (documented defaults, recorded separately so a calibration file can replace
them), checked term by term against 59 real vLLM 0.19.0 start-ups on H100-80GB
(``tests/data/llmd_memory``, ``sim/validate/memory.py``; 51 expressible, median block
error 0.04%, max 1.5%):

* weights: ``ModelSpec.weight_bytes() / tp`` plus the rotary cos/sin cache, which vLLM
  loads with the weights on every rank (``rope_cache_bytes``);
* activation peak of ``GPUModelRunner.profile_run`` at ``max_num_batched_tokens`` tokens:
  the larger of the forward (attention skipped, as in vLLM; ``forward_peak_bytes``) and
  the dummy sampler run on ``min(max_num_batched_tokens, max_num_seqs)`` requests
  (``sampler_peak_bytes``), since the forward's intermediates are freed before sampling,
  except MoE workspaces, which stay allocated (``moe_workspace_bytes``);
* non-torch memory growth: 0.25 GiB alone, 2.125 GiB with tensor parallelism (NCCL and
  all-reduce buffers; measured 0.24-0.27 and 2.06-2.21 GiB on H100 SXM, NVSwitch);
* CUDA graphs: 27/32 GiB (the median of vLLM 0.19's own capture estimates on those
  start-ups, 0.5-1.9 GiB); pass ``cudagraph_memory_bytes=0`` for ``enforce_eager`` or
  vLLM < 0.21.
"""

from __future__ import annotations

from calibrate.gpu_spec import GIB
from calibrate.model_spec import ModelSpec
from kvcore.kv_cache_interface import get_dtype_size

SAMPLER_BYTES_PER_LOGIT = 13  # on top of the logits themselves (model dtype)
FORWARD_HIDDEN_BUFFERS = 4  # hidden-size tensors live beside the MLP's at the forward's peak
NON_TORCH_BYTES = GIB // 4
NON_TORCH_TP_BYTES = 15 * GIB // 8
CUDAGRAPH_BYTES = 27 * GIB // 32


def default_non_torch_bytes(tp: int) -> int:
    """vLLM's non-torch memory growth (bytes) at tensor-parallel size ``tp``: 0.25 GiB
    alone, 2.125 GiB with tensor parallelism (H100 SXM measurements, module docstring)."""
    return NON_TORCH_BYTES + (NON_TORCH_TP_BYTES if tp > 1 else 0)


def cudagraph_estimate_bytes(model: ModelSpec, tp: int) -> int:
    """kvsim's estimate of vLLM's CUDA-graph memory on one rank (bytes): a constant,
    the median of vLLM 0.19's own estimates over the H100 start-ups (module docstring);
    ``model`` and ``tp`` are accepted for a size-aware estimate."""
    return CUDAGRAPH_BYTES


def rope_cache_bytes(model: ModelSpec) -> int:
    """The rotary embedding's cos/sin cache vLLM keeps beside the weights and counts in
    the weight memory (bytes, replicated on every rank): ``rope_cache_positions`` (default
    ``max_position_embeddings``) rows of the rotary dim in the model dtype
    (``vllm/model_executor/layers/rotary_embedding``: ``_compute_cos_sin_cache``)."""
    rotary = model.qk_rope_head_dim if "mla" in model.layer_kinds else model.head_size
    rows = model.rope_cache_positions or model.max_position_embeddings
    return rows * (rotary or 0) * get_dtype_size(model.dtype)


def moe_workspace_bytes(model: ModelSpec, tp: int, num_tokens: int) -> int:
    """The fused-MoE workspaces of a forward over ``num_tokens`` tokens on one rank
    (bytes; 0 for a dense model): per token, in the model dtype, ``k x max(I_moe / tp, H)
    + k x max(2 I_moe / tp, H) + H`` (``TritonExperts.workspace_shapes`` in
    ``vllm/model_executor/layers/fused_moe``). vLLM's workspace manager keeps them
    allocated after the forward, so they add to the sampler's peak too."""
    if not model.is_moe:
        return 0
    a = get_dtype_size(model.dtype)
    h, k = model.hidden_size, model.num_experts_per_tok
    i_moe = model.moe_intermediate_size / tp
    return int(a * num_tokens * (k * max(i_moe, h) + k * max(2 * i_moe, h) + h))


def forward_peak_bytes(model: ModelSpec, tp: int, num_tokens: int) -> int:
    """Peak of the profiling forward on one rank (bytes): ``num_tokens`` tokens, attention
    skipped (as in vLLM's ``_dummy_run(is_profile=True)``). Per token, in the model
    dtype: ``FORWARD_HIDDEN_BUFFERS x H + 3 I / tp`` for a dense layer (the MLP's gate-up
    output and activation output); for an MoE layer the hidden buffers and the shared
    experts' ``3 I_shared / tp``, plus ``moe_workspace_bytes``. The peak is the larger
    layer kind's."""
    a = get_dtype_size(model.dtype)
    hidden = FORWARD_HIDDEN_BUFFERS * model.hidden_size
    dense = a * num_tokens * (hidden + 3 * model.intermediate_size / tp)
    if not model.is_moe:
        return int(dense)
    shared = a * num_tokens * (hidden + 3 * model.shared_expert_intermediate_size / tp)
    moe = shared + moe_workspace_bytes(model, tp, num_tokens)
    return int(max(dense if model.num_moe_layers < model.num_layers else 0, moe))


def sampler_peak_bytes(model: ModelSpec, num_tokens: int, num_reqs: int) -> int:
    """Peak of vLLM's dummy sampler run (bytes; ``GPUModelRunner._dummy_sampler_run``):
    the forward's ``num_tokens x H`` hidden states, still held, plus ``num_reqs x vocab``
    logits (gathered whole on every rank, model dtype) and ``SAMPLER_BYTES_PER_LOGIT``
    per logit of float32 copies, sort values and indices of top-k/top-p sampling. 0
    without requests."""
    if num_reqs <= 0:
        return 0
    a = get_dtype_size(model.dtype)
    logits = num_reqs * model.vocab_size * (a + SAMPLER_BYTES_PER_LOGIT)
    return int(a * model.hidden_size * num_tokens + logits)


def activation_peak_bytes(
    model: ModelSpec, tp: int, max_num_batched_tokens: int, max_num_seqs: int
) -> int:
    """Peak of vLLM's profiling run on one rank above the loaded weights (bytes): the
    larger of the forward at ``max_num_batched_tokens`` and the dummy sampler run on
    ``min(max_num_batched_tokens, max_num_seqs)`` requests (``GPUModelRunner.profile_run``
    frees the forward's intermediates before sampling) plus the MoE workspaces still
    held then. ``max_num_seqs`` 0 gives the forward alone."""
    mbt = max_num_batched_tokens
    forward = forward_peak_bytes(model, tp, mbt)
    num_reqs = min(mbt, max_num_seqs)
    if num_reqs <= 0:
        return forward
    sampler = sampler_peak_bytes(model, mbt, num_reqs) + moe_workspace_bytes(model, tp, mbt)
    return max(forward, sampler)
