"""The default KV block budget of one GPU, without a GPU: vLLM's memory accounting with
analytic estimates in place of ``profile_run``'s measurements.

vLLM 0.33.0 (``vllm/v1/worker/gpu_worker.py: Worker.determine_available_memory``):
``available_kv = ceil(total * gpu_memory_utilization) - non_kv - cudagraph_estimate``
with ``non_kv = weights + transient activation peak + non-torch growth``; then kvcore's
port of ``get_kv_cache_configs`` turns the bytes into blocks (``num_blocks =
available // bytes_per_block``, minimum over tensor-parallel ranks, one request of
``max_model_len`` must fit). All terms are bytes per tensor-parallel rank.

The terms are estimated in ``calibrate.budget_terms`` (documented defaults, recorded
separately so a calibration file can replace them).

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

from calibrate.budget_terms import CUDAGRAPH_BYTES as CUDAGRAPH_BYTES
from calibrate.budget_terms import NON_TORCH_BYTES as NON_TORCH_BYTES
from calibrate.budget_terms import activation_peak_bytes as activation_peak_bytes
from calibrate.budget_terms import cudagraph_estimate_bytes as cudagraph_estimate_bytes
from calibrate.budget_terms import default_non_torch_bytes as default_non_torch_bytes
from calibrate.budget_terms import rope_cache_bytes as rope_cache_bytes
from calibrate.draft_kv import plan_with_draft
from calibrate.gpu_spec import GIB, GPUSpec
from calibrate.model_spec import ModelSpec
from kvcore.kv_cache_budget import KVCacheSizing, plan_kv_cache_budget
from kvcore.kv_cache_interface import KVCacheConfig
from kvcore.kv_cache_planning import InsufficientKVCacheMemoryError

DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.33.0 (0.9 before)
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")


@dataclass(frozen=True)
class MeasuredMemoryTerms:
    """Terms a calibration's memory profile measured (bytes per rank), replacing the
    estimates: ``non_torch_bytes`` is vLLM's ``total_consumed`` minus the weights; the
    activation peak was measured at ``max_num_batched_tokens`` / ``max_num_seqs`` and is
    rescaled by the analytic estimate's ratio for other batch limits."""

    total_memory_bytes: int
    weights_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    max_num_batched_tokens: int
    max_num_seqs: int

    @classmethod
    def from_profile(cls, terms: dict[str, object]) -> MeasuredMemoryTerms:
        """From ``ProfileResult.to_dict()`` (a calibration file's ``kv_budget``)."""
        t = {k: int(v) for k, v in terms.items() if isinstance(v, (int, float))}
        return cls(
            total_memory_bytes=t["total_memory_bytes"],
            weights_bytes=t["weights_bytes"],
            activation_peak_bytes=t["transient_peak_headroom_bytes"],
            non_torch_bytes=t["total_consumed_bytes"] - t["weights_bytes"],
            cudagraph_bytes=t["cudagraph_bytes"],
            max_num_batched_tokens=t["max_num_batched_tokens"],
            max_num_seqs=t["max_num_seqs"],
        )


class KVBudgetError(ValueError):
    """The configuration leaves no room for the KV cache (message names the knob)."""


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


def default_batch_limits(gpu: GPUSpec) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM 0.33.0 picks for the OpenAI server:
    16384/1024 on GPUs with >= 160 GiB, 8192/1024 on >= 70 GiB unless an A100, else
    2048/256 (``EngineArgs`` batch defaults, shared/notes/calibration.md §3.8)."""
    gib = gpu.memory_bytes / GIB
    if gib >= 160:
        return 16384, 1024
    if gib >= 70 and "a100" not in gpu.name.lower():
        return 8192, 1024
    return 2048, 256


def _check_args(model: ModelSpec, tp: int, util: float, block_size: int, dtype: str) -> None:
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise KVBudgetError(f"tensor_parallel_size must be an integer >= 1, got {tp!r}")
    if not (isinstance(util, (int, float)) and 0 < util <= 1):
        raise KVBudgetError(f"gpu_memory_utilization must be in (0, 1], got {util!r}")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise KVBudgetError(f"block_size must be a positive integer (tokens), got {block_size!r}")
    if dtype not in KV_CACHE_DTYPES:
        raise KVBudgetError(
            f"kv_cache_dtype: unknown {dtype!r}; allowed: {', '.join(KV_CACHE_DTYPES)}"
        )
    if "mla" not in model.layer_kinds and model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise KVBudgetError(
            f"tensor_parallel_size {tp} must divide or be a multiple of the model's "
            f"{model.num_kv_heads} KV heads"
        )


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise KVBudgetError(f"{name} must be a positive integer, got {value!r}")
    return value


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
    _check_args(model, tp, gpu_memory_utilization, block_size, kv_cache_dtype)
    default_mbt, default_seqs = default_batch_limits(gpu)
    mbt = _positive("max_num_batched_tokens", max_num_batched_tokens or default_mbt)
    seqs = _positive("max_num_seqs", max_num_seqs or default_seqs)
    max_len = _positive("max_model_len", max_model_len or model.max_position_embeddings)
    if max_len > model.max_position_embeddings:
        raise KVBudgetError(
            f"max_model_len {max_len} exceeds the model's max_position_embeddings "
            f"({model.max_position_embeddings})"
        )
    if mbt < seqs:
        mbt_from = "" if max_num_batched_tokens else f", vLLM's default on {gpu.name}"
        seqs_from = "" if max_num_seqs else f", vLLM's default on {gpu.name}"
        raise KVBudgetError(
            f"max_num_batched_tokens ({mbt}{mbt_from}) must be >= max_num_seqs "
            f"({seqs}{seqs_from}): set max_num_seqs or max_num_batched_tokens"
        )
    if num_gpu_blocks_override is not None:
        _positive("num_gpu_blocks_override", num_gpu_blocks_override)
    total = gpu.memory_bytes if measured is None else measured.total_memory_bytes
    requested = math.ceil(total * gpu_memory_utilization)
    dp = _positive("data_parallel_size", data_parallel_size)
    weights = model.weight_bytes_per_rank(tp, dp) + rope_cache_bytes(model)
    activation = activation_peak_bytes(model, tp, mbt, seqs)
    non_torch = non_torch_memory_bytes
    if non_torch is None:
        non_torch = default_non_torch_bytes(tp)
    graphs = cudagraph_memory_bytes
    if graphs is None:
        graphs = cudagraph_estimate_bytes(model, tp)
    if measured is not None:
        weights, non_torch = measured.weights_bytes, measured.non_torch_bytes
        if cudagraph_memory_bytes is None:
            graphs = measured.cudagraph_bytes
        at = activation_peak_bytes(
            model, tp, measured.max_num_batched_tokens, measured.max_num_seqs
        )
        activation = round(measured.activation_peak_bytes * activation / at)
    draft_weights = 0
    if draft_model is not None:
        draft_weights = draft_model.weight_bytes() // tp + rope_cache_bytes(draft_model)
        weights += draft_weights
    available = requested - weights - activation - non_torch - graphs
    if available <= 0 and num_gpu_blocks_override is None:
        raise KVBudgetError(
            f"no memory left for the KV cache: {requested / GIB:.2f} GiB requested "
            f"(gpu_memory_utilization {gpu_memory_utilization}), weights {weights / GIB:.2f} "
            f"GiB + activations {activation / GIB:.2f} GiB + reserves "
            f"{(non_torch + graphs) / GIB:.2f} GiB per GPU; raise --tensor-parallel-size or "
            f"--gpu-memory-utilization, or lower --max-num-batched-tokens"
        )
    sizing = KVCacheSizing(
        max_model_len=max_len,
        max_num_batched_tokens=mbt,
        block_size=block_size,
        tensor_parallel_size=tp,
        num_gpu_blocks_override=num_gpu_blocks_override,
        async_scheduling=async_scheduling is not False,
    )
    try:
        if draft_model is not None:
            plan = plan_with_draft(max(available, 0), sizing, model, draft_model, kv_cache_dtype)
        else:
            plan = plan_kv_cache_budget(
                available_memory_bytes=max(available, 0),
                sizing=sizing,
                **model.kv_planning_kwargs(kv_cache_dtype),  # type: ignore[arg-type]
            )
    except InsufficientKVCacheMemoryError as exc:
        where = (
            f"{num_gpu_blocks_override} blocks of num_gpu_blocks_override"
            if num_gpu_blocks_override is not None
            else f"{max(available, 0) / GIB:.2f} GiB left for the KV cache"
        )
        raise KVBudgetError(
            f"max_model_len: one request of {max_len} tokens does not fit in the {where}; "
            f"the longest that fits is {exc.estimated_max_model_len} tokens: lower "
            f"--max-model-len, or raise --gpu-memory-utilization / --tensor-parallel-size"
        ) from None
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
        weights_bytes=weights,
        activation_peak_bytes=activation,
        non_torch_bytes=non_torch,
        cudagraph_bytes=graphs,
        available_kv_bytes=available,
        bytes_per_block=plan.bytes_per_block,
        num_gpu_blocks=plan.num_blocks,
        num_gpu_blocks_override=num_gpu_blocks_override,
        kv_cache_size_tokens=plan.kv_cache_size_tokens,
        max_concurrency=plan.max_concurrency,
        num_kv_cache_groups=plan.num_groups,
        kv_cache_config=plan.kv_cache_config,
        draft_model=None if draft_model is None else draft_model.name,
        draft_weights_bytes=draft_weights,
    )


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
