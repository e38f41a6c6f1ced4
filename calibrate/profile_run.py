"""vLLM 0.33's startup memory profile and KV budget, term by term (no torch import here).

Order and formulas (shared/notes/calibration.md §3; vLLM's ``Worker.init_device``,
``determine_available_memory`` and ``memory_profiling``):

1. init device (the runner creates its GEMM handles), clean up, ``init`` snapshot;
   ``requested = ceil(total * gpu_memory_utilization)``;
2. load the weights: ``weights`` = torch's allocated-bytes delta;
3. clean up, reset the peak, run the profile: a dummy forward of
   ``max_num_batched_tokens`` tokens split over ``min(max_num_seqs, tokens)`` requests
   with attention skipped, then the dummy sampler on those requests; clean up, ``after``
   snapshot;
4. ``total_consumed = init.free - after.free`` (weights + persistent torch growth +
   non-torch growth); ``transient_peak_headroom = after.peak - after.allocated``;
   ``non_kv = total_consumed + headroom``;
5. optional CUDA-graph estimate; ``available = requested - non_kv - cudagraph``;
6. blocks from kvcore's planner (groups, one request of ``max_model_len`` must fit);
   with several ranks every rank gets the minimum.

When the runner's model has fewer layers than the spec (quick runs), the weight bytes
of the missing layers (``ModelSpec.weight_bytes`` difference) are added to ``weights``
and ``total_consumed`` (``missing_layer_bytes``). All terms are bytes per rank.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Protocol

from calibrate.budget import DEFAULT_GPU_MEMORY_UTILIZATION
from calibrate.budget_terms import activation_peak_bytes, default_non_torch_bytes, rope_cache_bytes
from calibrate.harness.memory_backend import MemoryBackend, MemorySnapshot
from calibrate.model_reduce import reduce_layers
from calibrate.model_spec import ModelSpec
from kvcore.kv_cache_budget import KVCacheSizing, plan_kv_cache_budget


class ProfileRunner(Protocol):
    """Runs the model pieces the profile measures (``TorchRunner`` is the real one)."""

    num_layers: int

    def init_device(self) -> None: ...

    def load_weights(self) -> int:
        """Load the model; return its parameter bytes (a hint for analytic backends)."""
        ...

    def dummy_forward(self, num_tokens: int, num_reqs: int) -> None: ...

    def dummy_sampler(self, num_reqs: int) -> None: ...

    def cudagraph_estimate(self, max_num_seqs: int) -> int | None: ...


@dataclass(frozen=True)
class ProfileConfig:
    """The engine arguments the profile depends on."""

    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    max_model_len: int = 8192
    block_size: int = 16
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    cudagraph_bytes: int | None = None  # None: ask the runner (or 0 without one)
    async_scheduling: bool = True
    """vLLM 0.33.0's default loop: a second step's tokens in flight, which
    sliding-window layers must hold (the budget's check that one request fits)."""


@dataclass(frozen=True)
class ProfileResult:
    """Every term of the profile (bytes per rank) and the resulting block budget."""

    backend: str
    total_memory_bytes: int
    gpu_memory_utilization: float
    requested_memory_bytes: int
    init_free_bytes: int
    weights_bytes: int
    missing_layer_bytes: int
    total_consumed_bytes: int
    torch_peak_bytes: int
    torch_allocated_bytes: int
    transient_peak_headroom_bytes: int
    non_torch_increase_bytes: int
    non_kv_cache_bytes: int
    cudagraph_bytes: int
    available_kv_bytes: int
    max_num_batched_tokens: int
    max_num_seqs: int
    num_profile_requests: int
    max_model_len: int
    block_size: int
    kv_cache_dtype: str
    tensor_parallel_size: int
    num_layers: int
    profiled_num_layers: int
    bytes_per_block: int
    num_kv_cache_groups: int
    num_gpu_blocks: int

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def num_gpu_blocks(
    spec: ModelSpec, available_per_rank: list[int], cfg: ProfileConfig
) -> tuple[int, int, int]:
    """(num_gpu_blocks, bytes_per_block, groups): kvcore's vLLM planning for the smallest
    rank's ``available`` bytes (every rank gets the minimum, as ``get_kv_cache_configs``)."""
    plan = plan_kv_cache_budget(
        available_memory_bytes=max(0, min(available_per_rank)),
        sizing=KVCacheSizing(
            max_model_len=cfg.max_model_len,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            block_size=cfg.block_size,
            tensor_parallel_size=cfg.tensor_parallel_size,
            async_scheduling=cfg.async_scheduling,
        ),
        **spec.kv_planning_kwargs(cfg.kv_cache_dtype),  # type: ignore[arg-type]
    )
    return plan.num_blocks, plan.bytes_per_block, plan.num_groups


def _weights_of(spec: ModelSpec, num_layers: int, tp: int) -> int:
    """Weights of ``spec`` cut to ``num_layers`` layers on one rank, with the rotary
    cache (bytes)."""
    return reduce_layers(spec, num_layers).weight_bytes() // tp + rope_cache_bytes(spec)


def _load_weights(
    spec: ModelSpec,
    backend: MemoryBackend,
    runner: ProfileRunner | None,
    num_layers: int,
    tp: int,
) -> MemorySnapshot:
    """Step 2: load the weights (the runner's model, or without one the estimate of
    ``num_layers`` layers booked on the backend); the snapshot after."""
    with backend.phase("load_weights") as hints:
        if runner is not None:
            hints["persistent"] = runner.load_weights()
        else:
            hints["persistent"] = _weights_of(spec, num_layers, tp)
    return backend.snapshot()


def _profile_batch(
    spec: ModelSpec,
    cfg: ProfileConfig,
    backend: MemoryBackend,
    runner: ProfileRunner | None,
    num_reqs: int,
) -> MemorySnapshot:
    """Step 3: the dummy forward of ``max_num_batched_tokens`` tokens over ``num_reqs``
    requests, then the dummy sampler on them, from a clean, peak-reset state (the
    backend books ``calibrate.budget``'s estimates of each phase); the snapshot after
    the final clean-up."""
    tp, mbt, seqs = cfg.tensor_parallel_size, cfg.max_num_batched_tokens, cfg.max_num_seqs
    backend.cleanup()
    backend.reset_peak()
    activation = activation_peak_bytes(spec, tp, mbt, seqs)
    non_torch = default_non_torch_bytes(tp)
    forward = activation_peak_bytes(spec, tp, mbt, 0)  # the activation without the sampler's
    with backend.phase("dummy_forward", transient=forward, non_torch=non_torch):
        if runner is not None:
            runner.dummy_forward(mbt, num_reqs)
    with backend.phase("dummy_sampler", transient=activation):
        if runner is not None:
            runner.dummy_sampler(num_reqs)
    backend.cleanup()
    return backend.snapshot()


def _cudagraph_bytes(cfg: ProfileConfig, runner: ProfileRunner | None) -> int:
    """Step 5: the CUDA-graph term (bytes): the configured one, else the runner's
    estimate, else 0."""
    graphs = cfg.cudagraph_bytes
    if graphs is None:
        graphs = (runner.cudagraph_estimate(cfg.max_num_seqs) if runner is not None else None) or 0
    return graphs


def profile_run(
    spec: ModelSpec,
    cfg: ProfileConfig,
    backend: MemoryBackend,
    runner: ProfileRunner | None = None,
) -> ProfileResult:
    """Run the profile (see the module docstring) and return every term.

    Without a ``runner`` nothing executes: the backend (analytic) books the estimates of
    ``calibrate.budget`` for each phase. With one, the runner's model runs and a CUDA
    backend measures; an analytic backend then books the runner's real parameter bytes.
    """
    tp, mbt, seqs = cfg.tensor_parallel_size, cfg.max_num_batched_tokens, cfg.max_num_seqs
    num_reqs = min(mbt, seqs)
    if runner is not None:
        runner.init_device()
    backend.cleanup()
    init = backend.snapshot()
    requested = math.ceil(init.total_bytes * cfg.gpu_memory_utilization)
    profiled_layers = runner.num_layers if runner is not None else spec.num_layers
    loaded = _load_weights(spec, backend, runner, profiled_layers, tp)
    weights_measured = loaded.torch_allocated_bytes - init.torch_allocated_bytes
    missing = _weights_of(spec, spec.num_layers, tp) - _weights_of(spec, profiled_layers, tp)
    after = _profile_batch(spec, cfg, backend, runner, num_reqs)

    total_consumed = init.free_bytes - after.free_bytes + missing
    headroom = after.torch_peak_bytes - after.torch_allocated_bytes
    non_kv = total_consumed + headroom
    graphs = _cudagraph_bytes(cfg, runner)
    available = requested - non_kv - graphs
    blocks, per_block, groups = num_gpu_blocks(spec, [available], cfg)
    weights = weights_measured + missing
    persistent_growth = after.torch_allocated_bytes - loaded.torch_allocated_bytes
    return ProfileResult(
        backend=backend.name,
        total_memory_bytes=init.total_bytes,
        gpu_memory_utilization=cfg.gpu_memory_utilization,
        requested_memory_bytes=requested,
        init_free_bytes=init.free_bytes,
        weights_bytes=weights,
        missing_layer_bytes=missing,
        total_consumed_bytes=total_consumed,
        torch_peak_bytes=after.torch_peak_bytes,
        torch_allocated_bytes=after.torch_allocated_bytes,
        transient_peak_headroom_bytes=headroom,
        non_torch_increase_bytes=total_consumed - weights - persistent_growth,
        non_kv_cache_bytes=non_kv,
        cudagraph_bytes=int(graphs),
        available_kv_bytes=available,
        max_num_batched_tokens=mbt,
        max_num_seqs=seqs,
        num_profile_requests=num_reqs,
        max_model_len=cfg.max_model_len,
        block_size=cfg.block_size,
        kv_cache_dtype=spec.kv_cache_dtype(cfg.kv_cache_dtype),
        tensor_parallel_size=tp,
        num_layers=spec.num_layers,
        profiled_num_layers=profiled_layers,
        bytes_per_block=per_block,
        num_kv_cache_groups=groups,
        num_gpu_blocks=blocks,
    )
