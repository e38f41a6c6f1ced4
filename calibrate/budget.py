"""The default KV block budget of one GPU, without a GPU: vLLM's memory accounting with
analytic estimates in place of ``profile_run``'s measurements.

vLLM 0.33.0 (``vllm/v1/worker/gpu_worker.py: Worker.determine_available_memory``):
``available_kv = ceil(total * gpu_memory_utilization) - non_kv - cudagraph_estimate``
with ``non_kv = weights + transient activation peak + non-torch growth``; then kvcore's
port of ``get_kv_cache_configs`` turns the bytes into blocks (``num_blocks =
available // bytes_per_block``, minimum over tensor-parallel ranks, one request of
``max_model_len`` must fit). All terms are bytes per tensor-parallel rank.

The terms are estimated in ``calibrate.budget_terms`` (documented defaults, recorded
separately so a calibration file can replace them); ``calibrate.budget_memory`` picks
each term's figure (estimate or measurement) and ``calibrate.budget_limits`` checks the
engine arguments and fills in vLLM's batch limits.

Which version each term follows: the formula, the default ``gpu_memory_utilization``
(0.92) and subtracting the CUDA-graph estimate are vLLM 0.33.0's (0.33 turned
``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` on by default from 0.21; 0.19 logs the
estimate but does not subtract it). The weights, activation and non-torch constants are
fitted to vLLM 0.19.0's measurements (``SAMPLER_BYTES_PER_LOGIT``,
``FORWARD_HIDDEN_BUFFERS``, the non-torch figures); 0.33's sampler warm-up and
``memory_profiling`` (``total_consumed`` from ``cudaMemGetInfo`` plus the freed peak,
``vllm/utils/mem_utils.py``) count the same tensors, which is assumed, not measured. The
batch defaults (``default_batch_limits``) are the same in both versions.

Known gap: an RTX 4090 vLLM 0.19 run (Llama-3.1-8B, 2048 tokens, 256
sequences) has 0.40 GiB of non-KV memory these terms do not explain (2791 blocks against
2588).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import asdict, dataclass, field

from calibrate.budget_limits import KVBudgetError, batch_limits, check_args, positive
from calibrate.budget_memory import MeasuredMemoryTerms, MemoryTerms, memory_terms
from calibrate.draft_kv import plan_with_draft
from calibrate.gpu_spec import GIB, GPUSpec
from calibrate.model_spec import ModelSpec
from kvcore.kv_cache_budget import KVCacheBudget, KVCacheSizing, plan_kv_cache_budget
from kvcore.kv_cache_interface import KVCacheConfig
from kvcore.kv_cache_planning import InsufficientKVCacheMemoryError

DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.33.0 (0.9 before)


@dataclass(frozen=True)
class KVBudget:
    """Every term of one GPU's KV block budget (bytes are per tensor-parallel rank).

    ``requested_memory_bytes = weights_bytes + activation_peak_bytes + non_torch_bytes +
    cudagraph_bytes + available_kv_bytes``; ``num_gpu_blocks = available_kv_bytes //
    bytes_per_block`` unless ``num_gpu_blocks_override`` is set. ``max_concurrency`` is
    how many requests of ``max_model_len`` tokens fit at once (as vLLM logs it).
    """

    model: str
    gpu: str
    tensor_parallel_size: int
    gpu_memory_utilization: float
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    kv_cache_dtype: str
    total_memory_bytes: int
    requested_memory_bytes: int
    weights_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    available_kv_bytes: int
    bytes_per_block: int
    num_gpu_blocks: int
    num_gpu_blocks_override: int | None
    kv_cache_size_tokens: int
    max_concurrency: float
    num_kv_cache_groups: int
    kv_cache_config: KVCacheConfig = field(repr=False, compare=False)
    draft_model: str | None = None
    """Speculative decoding's draft model (its weights are in ``weights_bytes``, its
    KV layers in every block); None: none."""
    draft_weights_bytes: int = 0
    """The draft model's share of ``weights_bytes`` (per rank)."""

    def to_dict(self) -> dict[str, object]:
        """All terms as JSON-ready values (the kvcore config left out; the draft
        model's terms only when there is one)."""
        out = asdict(self)
        out.pop("kv_cache_config")
        if self.draft_model is None:
            out.pop("draft_model")
            out.pop("draft_weights_bytes")
        return out


def compute_kv_budget(
    model: ModelSpec,
    gpu: GPUSpec,
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_model_len: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    block_size: int = 16,
    kv_cache_dtype: str = "auto",
    num_gpu_blocks_override: int | None = None,
    async_scheduling: bool | None = None,
    data_parallel_size: int = 1,
    *,
    cudagraph_memory_bytes: int | None = None,
    non_torch_memory_bytes: int | None = None,
    measured: MeasuredMemoryTerms | None = None,
    draft_model: ModelSpec | None = None,
) -> KVBudget:
    """The KV block budget of ``model`` on one ``gpu`` (per tensor-parallel rank).

    ``None`` picks vLLM 0.33.0's default: ``max_model_len`` the model's
    ``max_position_embeddings``; ``max_num_batched_tokens`` / ``max_num_seqs`` from
    ``default_batch_limits``; graph and non-torch terms from the module's constants.
    Raises ``KVBudgetError`` (a ValueError) naming the knob when the weights leave no
    room or one ``max_model_len`` request does not fit. ``measured`` (from a calibration
    file) replaces the total memory, weights, activation, non-torch and graph estimates.
    ``async_scheduling`` None is vLLM 0.33.0's default, on (none of the options that turn
    it off exists in kvsim): a second step's tokens are then in flight, which a
    sliding-window or chunked-local layer must hold (``max_in_flight_tokens``).
    ``data_parallel_size``: with an MoE model, its routed experts are split over the
    ``data_parallel_size * tp`` ranks (:meth:`ModelSpec.weight_bytes_per_rank`); the
    fused-MoE workspaces are sized for this rank's tokens (vLLM sizes them for the DP
    group's chunk; not modelled).
    ``draft_model``: speculative decoding's draft model on the same GPUs (same
    tensor-parallel size): its weights join the target's and its KV layers every
    block (:mod:`calibrate.draft_kv`).
    """
    tp = tensor_parallel_size
    check_args(model, tp, gpu_memory_utilization, block_size, kv_cache_dtype)
    mbt, seqs, max_len = batch_limits(
        model, gpu, max_model_len, max_num_batched_tokens, max_num_seqs
    )
    if num_gpu_blocks_override is not None:
        positive("num_gpu_blocks_override", num_gpu_blocks_override)
    total = gpu.memory_bytes if measured is None else measured.total_memory_bytes
    requested = math.ceil(total * gpu_memory_utilization)
    dp = positive("data_parallel_size", data_parallel_size)
    terms = memory_terms(
        model, tp, dp, mbt, seqs,
        cudagraph_memory_bytes=cudagraph_memory_bytes,
        non_torch_memory_bytes=non_torch_memory_bytes,
        measured=measured,
        draft_model=draft_model,
    )  # fmt: skip
    available = requested - terms.weights - terms.activation - terms.non_torch - terms.cudagraphs
    if available <= 0 and num_gpu_blocks_override is None:
        raise _no_room_error(requested, gpu_memory_utilization, terms)
    sizing = KVCacheSizing(
        max_model_len=max_len,
        max_num_batched_tokens=mbt,
        block_size=block_size,
        tensor_parallel_size=tp,
        num_gpu_blocks_override=num_gpu_blocks_override,
        async_scheduling=async_scheduling is not False,
    )
    plan = _plan_blocks(max(available, 0), sizing, model, draft_model, kv_cache_dtype)
    return KVBudget(
        model=model.name,
        gpu=gpu.name,
        tensor_parallel_size=tp,
        gpu_memory_utilization=float(gpu_memory_utilization),
        max_model_len=max_len,
        max_num_batched_tokens=mbt,
        max_num_seqs=seqs,
        block_size=block_size,
        kv_cache_dtype=model.kv_cache_dtype(kv_cache_dtype),
        total_memory_bytes=total,
        requested_memory_bytes=requested,
        weights_bytes=terms.weights,
        activation_peak_bytes=terms.activation,
        non_torch_bytes=terms.non_torch,
        cudagraph_bytes=terms.cudagraphs,
        available_kv_bytes=available,
        bytes_per_block=plan.bytes_per_block,
        num_gpu_blocks=plan.num_blocks,
        num_gpu_blocks_override=num_gpu_blocks_override,
        kv_cache_size_tokens=plan.kv_cache_size_tokens,
        max_concurrency=plan.max_concurrency,
        num_kv_cache_groups=plan.num_groups,
        kv_cache_config=plan.kv_cache_config,
        draft_model=None if draft_model is None else draft_model.name,
        draft_weights_bytes=terms.draft_weights,
    )


def _no_room_error(requested: int, util: float, terms: MemoryTerms) -> KVBudgetError:
    """The error for a configuration whose non-KV terms fill the ``requested`` bytes
    (``util``: its ``gpu_memory_utilization``), naming the knobs that make room."""
    reserves = terms.non_torch + terms.cudagraphs
    return KVBudgetError(
        f"no memory left for the KV cache: {requested / GIB:.2f} GiB requested "
        f"(gpu_memory_utilization {util}), weights {terms.weights / GIB:.2f} "
        f"GiB + activations {terms.activation / GIB:.2f} GiB + reserves "
        f"{reserves / GIB:.2f} GiB per GPU; raise --tensor-parallel-size or "
        f"--gpu-memory-utilization, or lower --max-num-batched-tokens"
    )


def _plan_blocks(
    available: int,
    sizing: KVCacheSizing,
    model: ModelSpec,
    draft_model: ModelSpec | None,
    kv_cache_dtype: str,
) -> KVCacheBudget:
    """kvcore's block plan for ``available`` bytes of KV cache (the draft model's KV
    layers in every block when there is one); KVBudgetError naming ``max_model_len``
    when one request of it does not fit."""
    try:
        if draft_model is not None:
            return plan_with_draft(available, sizing, model, draft_model, kv_cache_dtype)
        return plan_kv_cache_budget(
            available_memory_bytes=available,
            sizing=sizing,
            **model.kv_planning_kwargs(kv_cache_dtype),  # type: ignore[arg-type]
        )
    except InsufficientKVCacheMemoryError as exc:
        override = sizing.num_gpu_blocks_override
        where = (
            f"{override} blocks of num_gpu_blocks_override"
            if override is not None
            else f"{available / GIB:.2f} GiB left for the KV cache"
        )
        raise KVBudgetError(
            f"max_model_len: one request of {sizing.max_model_len} tokens does not fit in "
            f"the {where}; the longest that fits is {exc.estimated_max_model_len} tokens: "
            f"lower --max-model-len, or raise --gpu-memory-utilization / "
            f"--tensor-parallel-size"
        ) from None


def budget_engine_args() -> tuple[str, ...]:
    """The engine arguments the KV budget depends on (vLLM names): the parameters of
    :func:`compute_kv_budget` after ``model`` and ``gpu``, read from its signature so the
    function is the one list of them."""
    params = inspect.signature(compute_kv_budget).parameters.values()
    return tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD)[2:]


def engine_kv_budget(
    model: ModelSpec, gpu: GPUSpec, engine: object, *, measured: MeasuredMemoryTerms | None = None
) -> KVBudget:
    """:func:`compute_kv_budget` with each engine argument of :func:`budget_engine_args`
    read by name from ``engine`` (a ``sim.app.engine_config.EngineConfig``: its fields carry
    vLLM's names), so an argument added to the budget reaches it from the engine
    configuration with no list of keywords in between."""
    args = {name: getattr(engine, name) for name in budget_engine_args()}
    draft = draft_model_of(engine, model)
    return compute_kv_budget(model, gpu, **args, measured=measured, draft_model=draft)


def draft_model_of(engine: object, target: ModelSpec | None = None) -> ModelSpec | None:
    """The drafter's model of an engine's ``speculative_config``
    (``num_speculative_tokens >= 1``): ``method: draft_model``'s model, loaded from the
    catalog (a name or a model file), or for ``eagle`` / ``eagle3`` the head derived
    from ``target`` (:func:`calibrate.eagle_head.eagle_head`); None for the n-gram
    methods or without one. The settings may be a mapping (an engine built unchecked).
    KVBudgetError naming the flag when the catalog has no such model."""
    spec = getattr(engine, "speculative_config", None)
    if spec is None:
        return None
    get = spec.get if isinstance(spec, dict) else lambda name: getattr(spec, name, None)
    k = get("num_speculative_tokens")
    method = get("method")
    if not isinstance(k, int) or k < 1:
        return None
    if method in ("eagle", "eagle3") and target is not None:
        from calibrate.eagle_head import eagle_head

        return eagle_head(target, str(method))
    if method != "draft_model":
        return None
    from calibrate.catalog import CatalogError, load_model

    name = get("model")
    try:
        return load_model(str(name))
    except CatalogError as e:
        raise KVBudgetError(
            f"--speculative-config: model: {str(e).removeprefix('model: ')}"
        ) from None
