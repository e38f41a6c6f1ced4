"""``kvsim calibrate`` end to end: profile_run, sweep, fit, calibration file (needs torch).

``calibrate(options)`` returns the ``Calibration`` and writes it (YAML) plus the raw
sweep CSV. CPU runs use one thread, process time, fp32 and the torch reference kernel;
CUDA runs use bf16, the Triton kernel, CUDA events and torch's memory statistics.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from calibrate.budget_limits import default_batch_limits
from calibrate.calibration_file import (
    SCHEMA_VERSION,
    Calibration,
    GPUSection,
    LatencySection,
    ModelSection,
    save_calibration,
)
from calibrate.catalog import list_gpus, load_gpu, load_model
from calibrate.fit import FitResult, fit_step_model
from calibrate.gpu_spec import GIB, GPUSpec
from calibrate.harness.memory_backend import AnalyticMemoryBackend, CudaMemoryBackend
from calibrate.harness.output_files import check_outputs, write_atomically
from calibrate.harness.profile_sweep import (
    SweepGrid,
    blocks_needed,
    plan_sweep,
    run_sweep,
    write_csv,
)
from calibrate.model_reduce import reduce_layers
from calibrate.model_spec import ModelSpec
from calibrate.profile_run import ProfileConfig, ProfileResult, profile_run
from calibrate.step_features import FEATURES, StepFeatures

if TYPE_CHECKING:
    from calibrate.harness.torch_runner import TorchRunner

TINY_MODEL = ModelSpec(
    name="kvsim-tiny",
    architecture="LlamaForCausalLM",
    num_layers=2,
    hidden_size=256,
    intermediate_size=768,
    num_attention_heads=4,
    num_kv_heads=2,
    head_size=64,
    vocab_size=8192,
    max_position_embeddings=8192,
    dtype="float32",
    layer_types=("full", "full"),
)
# Nominal single-core CPU peaks: only a scale for the features (coefficients absorb it).
CPU_NOMINAL = {"bf16_tflops": 0.05, "fp16_tflops": 0.05, "hbm_bandwidth_gbps": 10.0}


@dataclass
class CalibrateOptions:
    device: str = "cpu"
    model: str | None = None
    tp: int = 1
    quick: bool = False
    out: str | None = None
    num_layers: int | None = None
    seed: int = 0
    force: bool = False
    """Replace an existing ``out`` (or its CSV) that kvsim did not write."""


def resolve_model(name: str | None, device: str) -> ModelSpec:
    """``kvsim-tiny`` (the CPU default), a catalog name or a config.json path."""
    if name is None:
        name = "kvsim-tiny" if device == "cpu" else "Llama-3.1-8B"
    if name.lower() == "kvsim-tiny":
        return TINY_MODEL
    return load_model(name)


def match_catalog_gpu(device_name: str, memory_bytes: int) -> GPUSpec | None:
    """The catalog GPU whose first name token appears in the device name, closest in
    memory (e.g. ``NVIDIA H200`` -> ``H200``); None when nothing matches."""
    flat = device_name.lower().replace(" ", "").replace("-", "")
    best = None
    for name in list_gpus():
        token = name.lower().split("-")[0]
        if token and token in flat:
            gpu = load_gpu(name)
            gap = abs(gpu.memory_bytes - memory_bytes)
            if best is None or gap < best[0]:
                best = (gap, gpu)
    return best[1] if best else None


def _versions() -> dict[str, str | None]:
    import torch

    try:
        import triton

        triton_version: str | None = triton.__version__
    except ImportError:
        triton_version = None
    from kvcore import __version__

    return {
        "torch": torch.__version__,
        "triton": triton_version,
        "cuda": torch.version.cuda,
        "kvsim": __version__,
    }


def _device_section(device: str) -> GPUSection:
    import torch

    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        total = int(torch.cuda.mem_get_info(0)[1])
        match = match_catalog_gpu(props.name, total)
        ref = match or load_gpu("H100-SXM")
        return GPUSection(
            name=props.name,
            catalog_name=match.name if match else None,
            memory_bytes=total,
            properties={
                "multi_processor_count": props.multi_processor_count,
                "compute_capability": f"{props.major}.{props.minor}",
                "nominal_peaks_from": ref.name,
            },
            bf16_tflops=ref.bf16_tflops,
            fp16_tflops=ref.fp16_tflops,
            hbm_bandwidth_gbps=ref.hbm_bandwidth_gbps,
            interconnect_bandwidth_gbps=ref.interconnect_bandwidth_gbps,
        )
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return GPUSection(
        name="cpu",
        memory_bytes=int(total),
        properties={"threads": 1, "cpu_count": os.cpu_count()},
        interconnect_bandwidth_gbps=10.0,
        **CPU_NOMINAL,
    )


def _grid(device: str, quick: bool, max_len: int) -> tuple[SweepGrid, int, int]:
    """(grid, repeats, warmup) for the device."""
    if device == "cpu":
        grid = SweepGrid(32, 1024, 512, 40, 5) if quick else SweepGrid(64, 4096, 1024, 80, 6)
        return grid, 5, 1
    if quick:
        grid = SweepGrid(256, min(8192, max_len // 2), 4096, 40, 6, 1 << 20)
    else:
        grid = SweepGrid(512, min(32768, max_len // 2), 16384, 60, 8, 1 << 22)
    return grid, 5, 2


def _memory_profile(
    spec: ModelSpec,
    opts: CalibrateOptions,
    runner: TorchRunner,
    gpu: GPUSection,
    max_len: int,
    on_progress: Callable[[str, int, int], None] | None,
) -> ProfileResult:
    """vLLM's start-up memory profile of ``runner`` on the device (``profile_run``): at
    vLLM's default batch limits on CUDA (2048 tokens / 256 sequences on the CPU), with
    torch's memory statistics on CUDA, else the analytic backend of the host's memory."""
    device = opts.device
    hw = gpu.as_gpu_spec()
    mbt, seqs = default_batch_limits(hw) if device == "cuda" else (2048, 256)
    cfg = ProfileConfig(
        max_num_batched_tokens=mbt,
        max_num_seqs=seqs,
        max_model_len=max_len,
        tensor_parallel_size=opts.tp,
    )
    mem = CudaMemoryBackend() if device == "cuda" else AnalyticMemoryBackend(gpu.memory_bytes)
    if on_progress:
        on_progress("profile_run", 0, 1)
    return profile_run(spec, cfg, mem, runner)


def _sweep_and_fit(
    spec: ModelSpec,
    opts: CalibrateOptions,
    runner: TorchRunner,
    hw: GPUSpec,
    sweep: tuple[SweepGrid, int, int],
    on_progress: Callable[[str, int, int], None] | None,
) -> tuple[FitResult, list[dict[str, object]]]:
    """Time the planned steps of ``sweep`` (grid, repeats, warm-up runs) on ``runner``
    and fit the step model to them (seconds); (fit, the sweep's rows)."""
    grid, repeats, warmup = sweep
    steps = plan_sweep(grid, opts.seed)
    runner.allocate_kv(blocks_needed(steps, runner.block_size) + 1)
    rows = run_sweep(
        runner,
        steps,
        repeats,
        warmup,
        opts.seed,
        lambda i: on_progress("sweep", i, len(steps)) if on_progress else None,
    )
    profiled = reduce_layers(spec, runner.num_layers)
    pairs = [(s.new_tokens, s.context_tokens) for s in steps]
    feats = StepFeatures(profiled, hw, opts.tp).matrix(pairs)
    times = np.array([float(r["time_s"]) for r in rows])
    return fit_step_model(feats, times, [s.regime for s in steps], opts.seed), rows


def _latency_section(
    result: FitResult, device: str, repeats: int, warmup: int, csv_path: Path
) -> LatencySection:
    """The calibration file's step model: the fit's coefficients and errors, how the
    steps were timed, and the raw sweep's file name."""
    timing = (
        "CUDA events, median of repeats after warm-up"
        if device == "cuda"
        else "process time, 1 thread, min of repeats after warm-up"
    )
    return LatencySection(
        features=list(FEATURES),
        coefficients={f: float(c) for f, c in zip(FEATURES, result.coefficients, strict=True)},
        holdout_mape=result.holdout_mape,
        train_mape=result.train_mape,
        residual_quantiles=result.residual_quantiles,
        num_train=result.num_train,
        num_holdout=result.num_holdout,
        timing=f"{timing}; {repeats} repeats, {warmup} warm-up",
        raw_csv=csv_path.name,
    )


def calibrate(
    opts: CalibrateOptions, on_progress: Callable[[str, int, int], None] | None = None
) -> tuple[Calibration, Path, Path]:
    """Run everything; return (calibration, YAML path, CSV path)."""
    import torch

    from calibrate.harness.torch_runner import TorchRunner

    device = opts.device
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device")
    spec = resolve_model(opts.model, device)
    out = Path(opts.out or f"calibration-{spec.name}-{device}.yaml")
    check_outputs(out, opts.force)
    if device == "cpu":
        torch.set_num_threads(1)
    dtype = "float32" if device == "cpu" else "bfloat16"
    backend_name = "torch" if device == "cpu" else "triton"
    layers = opts.num_layers or (spec.num_layers if device == "cpu" else (4 if opts.quick else 8))
    runner = TorchRunner(spec, device, dtype, layers, opts.tp, backend_name, seed=opts.seed)
    gpu = _device_section(device)
    max_len = min(spec.max_position_embeddings, 8192 if device == "cpu" else 131072)
    prof = _memory_profile(spec, opts, runner, gpu, max_len, on_progress)
    sweep = _grid(device, opts.quick, max_len)
    result, rows = _sweep_and_fit(spec, opts, runner, gpu.as_gpu_spec(), sweep, on_progress)
    csv_path = out.with_suffix(".csv")
    write_atomically(csv_path, lambda tmp: write_csv(rows, tmp))
    cal = Calibration(
        schema_version=SCHEMA_VERSION,
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        device=device,
        dtype=dtype,
        tensor_parallel_size=opts.tp,
        attention_backend=backend_name,
        versions=_versions(),
        model=ModelSection(name=spec.name, spec=spec, profiled_num_layers=runner.num_layers),
        gpu=gpu,
        latency=_latency_section(result, device, sweep[1], sweep[2], csv_path),
        kv_budget=prof.to_dict(),
    )
    write_atomically(out, lambda tmp: save_calibration(cal, tmp))
    return cal, out, csv_path


__all__ = ["GIB", "TINY_MODEL", "CalibrateOptions", "calibrate", "match_catalog_gpu"]
