"""Resolve a run request into everything the simulation needs.

Model and GPU come from the catalog (or files), the KV block budget from
``calibrate.budget`` (vLLM's accounting), the step-time model from
``calibrate.latency``, the workload from ``workloads``. Any bad input raises a
``ValueError`` whose message names the file or flag and the field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from calibrate.cudagraph_sizes import capture_sizes
from calibrate.efficiency_file import EfficiencyCalibration
from calibrate.frontend import FrontendModel
from calibrate.latency import make_latency_model
from calibrate.use_calibration import budget_inputs, calibrated_latency
from kvcore.kv_cache_interface import KVCacheConfig
from sim.app.engine_config import EngineConfig
from sim.app.kv_offload import OffloadSetup, resolve_offload
from sim.app.pd_config import (
    PDSetup,
    PDSpec,
    check_decode_fits,
    check_pd_run,
    parse_pd,
    resolve_pd,
)
from sim.app.pd_setup import pool_layout, pool_link, pool_runs
from sim.app.trace_ahead import read_trace
from sim.app.work_bounds import check_work_bounds
from sim.engine.router import make_router
from sim.records.step_parquet import check_format
from sim.records.step_thin import check_mode
from sim.spec_decode.setup import SpecSetup, resolve_spec
from workloads import load_workload

if TYPE_CHECKING:
    from sim.app.run import RunSpec


@dataclass
class ResolvedRun:
    """A runnable setup; every default resolved."""

    workload: Any
    workload_name: str
    workload_config: dict[str, Any]
    model_name: str
    gpu_name: str
    engine: EngineConfig
    seed: int | None
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    num_gpu_blocks: int
    kv_cache_config: KVCacheConfig
    budget_terms: dict[str, Any]
    latency_model: Any
    latency_description: dict[str, Any]
    frontend: FrontendModel = field(default_factory=FrontendModel)
    """The API server's costs, for client-side latencies (:mod:`calibrate.frontend`)."""
    offload: OffloadSetup | None = None
    """The CPU KV offload tier (``--kv-offloading-size``); None: none."""
    spec: SpecSetup | None = None
    """Speculative decoding (``--speculative-config``); None: none."""
    pd: PDSetup | None = None
    """Prefill/decode disaggregation (``--pd``, :mod:`sim.engine.pd_cluster`); None: none."""
    is_moe: bool = False
    """A mixture-of-experts model: its DP ranks step in lockstep (:mod:`sim.engine.dp_lockstep`)."""
    replica_latency_models: tuple[Any, ...] | None = None
    """One latency model per replica (``kvsim calibrate --from-trace`` records each
    replica's steps apart); None: ``latency_model`` for every replica."""

    @property
    def dp_lockstep(self) -> bool:
        """Whether replicas step in lockstep per DP group: a MoE model with
        ``data_parallel_size`` > 1 (vLLM's ``DPEngineCoreProc``)."""
        return self.is_moe and self.engine.data_parallel_size > 1


def check_cluster(spec: RunSpec) -> None:
    """ValueError naming the field when ``num_replicas`` (a multiple of the engine's
    ``data_parallel_size``) or ``router`` is bad."""
    if not isinstance(spec.num_replicas, int) or spec.num_replicas < 1:
        raise ValueError(f"--num-replicas: must be an integer >= 1 (got {spec.num_replicas!r})")
    dp = spec.engine.data_parallel_size
    if spec.num_replicas % dp:
        raise ValueError(
            f"--num-replicas: must be a multiple of --data-parallel-size {dp} (each DP rank "
            f"is one replica; got {spec.num_replicas})"
        )
    make_router(spec.router)
    if getattr(spec, "pd", None) is not None and spec.num_replicas != 1:
        raise ValueError(
            "--num-replicas: a P/D run sizes its pools with --pd prefill=P,decode=D; "
            "leave --num-replicas (and --data-parallel-size) at 1"
        )


def engine_capture_sizes(engine: EngineConfig, budget: Any, gpu: Any) -> tuple[int, ...]:
    """The CUDA graph sizes vLLM captures for this engine (:mod:`calibrate.cudagraph_sizes`;
    ``budget``: the resolved KV budget, for ``max_num_seqs`` and ``max_num_batched_tokens``)."""
    spec = engine.speculative_config
    drafts = spec.num_speculative_tokens if spec is not None else 0
    return capture_sizes(
        budget.max_num_seqs, budget.max_num_batched_tokens, gpu.compute_capability,
        decode_query_len=1 + drafts, enforce_eager=engine.enforce_eager,
    )  # fmt: skip


def _latency_model(
    spec: RunSpec, engine: EngineConfig, cal: Any, model: Any, gpu: Any, budget: Any
) -> Any:
    """The run's step-time model: ``constant`` when asked, a calibration file's fitted
    model, else the roofline (with an efficiency file's factors when ``cal`` is one,
    and the CUDA graph sizes the engine captures)."""
    if engine.latency_model == "constant":
        return make_latency_model("constant", step_s=engine.constant_step_s)
    if cal is not None and not isinstance(cal, EfficiencyCalibration):
        return calibrated_latency(cal, str(spec.calibration))
    return make_latency_model(
        "roofline",
        model=model,
        gpu=gpu,
        tensor_parallel_size=engine.tensor_parallel_size,
        kv_cache_dtype=engine.kv_cache_dtype,
        data_parallel_size=engine.data_parallel_size,
        efficiency=cal.factors() if isinstance(cal, EfficiencyCalibration) else None,
        cudagraph_sizes=engine_capture_sizes(engine, budget, gpu),
    )


def _check_chunked_prefill(engine: EngineConfig, budget: Any) -> None:
    """ValueError when chunked prefill is off and one step cannot hold a prompt of
    ``max_model_len`` tokens."""
    if not engine.enable_chunked_prefill and budget.max_num_batched_tokens < budget.max_model_len:
        raise ValueError(
            f"max_num_batched_tokens ({budget.max_num_batched_tokens}) is smaller than "
            f"max_model_len ({budget.max_model_len}) with enable_chunked_prefill off: raise "
            "--max-num-batched-tokens or lower --max-model-len"
        )


def _resolve_pd(
    spec: RunSpec,
    budget: Any,
    gpu: Any,
    offload: OffloadSetup | None,
    speculative: SpecSetup | None,
) -> tuple[PDSetup | None, PDSpec | None]:
    """(the P/D setup, its parsed ``--pd`` spec) of the run, checked against the CPU
    offload tier and speculative decoding, and with a decode instance that holds a
    ``max_model_len`` request; (None, spec or None) for a colocated run."""
    engine = spec.engine
    pd_spec = getattr(spec, "pd", None)
    pd_spec = parse_pd(pd_spec) if isinstance(pd_spec, str) else pd_spec
    pd = resolve_pd(
        pd_spec,
        budget.kv_cache_config,
        engine.tensor_parallel_size,
        gpu,
    )
    if pd is not None:
        check_pd_run(
            pd,
            offload=offload is not None,
            spec_decode=speculative is not None,
        )
        check_decode_fits(
            budget.num_gpu_blocks, engine.block_size, budget.max_model_len, budget.max_model_len
        )
    return pd, pd_spec


def _check_dp_lockstep(resolved: ResolvedRun) -> None:
    """ValueError when a MoE model's DP ranks step in lockstep and the run has a CPU
    offload tier or P/D pools (not modelled together)."""
    if resolved.dp_lockstep and (resolved.offload is not None or resolved.pd is not None):
        flag = "--kv-offloading-size" if resolved.offload is not None else "--pd"
        raise ValueError(
            f"{flag}: not modelled with --data-parallel-size for a MoE model (its DP ranks "
            "step in lockstep)"
        )


def _pool_settings(spec: RunSpec, pd_spec: PDSpec, gpu: Any, resolved: ResolvedRun) -> None:
    """Give ``resolved``'s P/D setup the pools' own runs, link and layout when the pools
    have settings of their own (``--pd FILE.yaml``)."""
    pd = resolved.pd
    assert pd is not None
    runs = pool_runs(pd_spec, spec, resolved)
    if runs:
        rate, latency = pool_link(pd_spec, gpu)
        layout = pool_layout(runs, resolved)
        resolved.pd = dataclasses.replace(
            pd, runs=runs, link_bytes_per_s=rate, latency_s=latency, **layout
        )


def resolve_run(spec: RunSpec, *, allow_large: bool | None = None) -> ResolvedRun:
    """Load and check everything (the cluster's replica count and router first); raise
    ValueError (naming the field) on bad input, and on work far beyond what one machine
    can simulate (:func:`sim.app.work_bounds.check_work_bounds`; ``allow_large=True`` or
    ``KVSIM_ALLOW_LARGE=1`` in the environment skips that check)."""
    check_cluster(spec)
    check_mode(spec.steps, "steps")
    check_format(spec.steps_format, "steps_format")
    engine = spec.engine
    cal, model, gpu, budget_fn = budget_inputs(
        spec.calibration, spec.model, spec.gpu, engine.tensor_parallel_size
    )
    budget = budget_fn(model, gpu, engine)  # ValueError when the engine cannot start
    latency = _latency_model(spec, engine, cal, model, gpu, budget)
    _check_chunked_prefill(engine, budget)
    offload = resolve_offload(
        engine.kv_offloading_size,
        budget.kv_cache_config,
        engine.tensor_parallel_size,
        gpu.host_link_bytes_per_s,
    )
    speculative = resolve_spec(
        engine,
        target=model,
        max_model_len=budget.max_model_len,
        max_num_batched_tokens=budget.max_num_batched_tokens,
        gpu=gpu,
        offload=offload is not None,
        target_latency=latency,
    )
    pd, pd_spec = _resolve_pd(spec, budget, gpu, offload, speculative)
    workload = load_workload(
        spec.workload, seed=spec.seed, overrides=spec.workload_overrides, read=read_trace
    )
    if pd is not None and getattr(workload, "has_timeouts", False):
        raise ValueError(f"{spec.workload}: --pd: request timeouts are not modelled with P/D")
    describe = getattr(latency, "describe", None)
    resolved = ResolvedRun(
        workload=workload,
        workload_name=workload.name,
        workload_config=workload.spec,
        model_name=model.name,
        is_moe=model.num_experts > 0,
        gpu_name=gpu.name,
        engine=engine,
        seed=spec.seed,
        max_model_len=budget.max_model_len,
        max_num_batched_tokens=budget.max_num_batched_tokens,
        max_num_seqs=budget.max_num_seqs,
        num_gpu_blocks=budget.num_gpu_blocks,
        kv_cache_config=budget.kv_cache_config,
        budget_terms=budget.to_dict(),
        latency_model=latency,
        latency_description=describe() if describe else {"kind": engine.latency_model},
        offload=offload,
        spec=speculative,
        pd=pd,
    )
    _check_dp_lockstep(resolved)
    if pd is not None and pd_spec is not None:
        _pool_settings(spec, pd_spec, gpu, resolved)
    check_work_bounds(resolved, allow_large=allow_large, source=spec.workload)
    return resolved
