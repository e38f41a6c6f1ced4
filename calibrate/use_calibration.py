"""Resolve a run's model, GPU, KV budget and latency model from a calibration file.

Used by ``kvsim run --calibration`` and ``kvsim budget --calibration``: the file must
be for the model, GPU and tensor-parallel size asked for (``CalibrationError``, a
ValueError naming the flag, otherwise); what is not asked for is taken from the file
(:func:`calibration_defaults`). The model may be named as the file names it
(its spec is embedded, so e.g. ``kvsim-tiny`` needs no catalog entry); the GPU by its
catalog name or the measured device name (``cpu`` for CPU calibrations).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from calibrate.budget import KVBudget, MeasuredMemoryTerms, engine_kv_budget
from calibrate.calibration_file import (
    Calibration,
    CalibrationError,
    FittedLatencyModel,
    check_matches,
    load_calibration,
    norm_name,
)
from calibrate.catalog import load_gpu, load_model
from calibrate.efficiency_file import EfficiencyCalibration, is_efficiency_file, load_efficiency
from calibrate.gpu_spec import GPUSpec
from calibrate.model_spec import ModelSpec


def resolve_calibrated(
    path: str | Path, model: str, gpu: str, tensor_parallel_size: int
) -> tuple[Calibration, ModelSpec, GPUSpec]:
    """(calibration, model spec, GPU spec) for a run that asks for ``model`` on ``gpu``."""
    cal = load_calibration(path)
    spec = cal.model.spec if norm_name(model) == norm_name(cal.model.name) else load_model(model)
    check_matches(cal, spec, gpu, str(path))
    if cal.tensor_parallel_size != tensor_parallel_size:
        raise CalibrationError(
            f"--calibration {path}: the file is for tensor_parallel_size "
            f"{cal.tensor_parallel_size}, not {tensor_parallel_size}"
        )
    hw = load_gpu(cal.gpu.catalog_name) if cal.gpu.catalog_name else cal.gpu.as_gpu_spec()
    return cal, spec, hw


def calibration_defaults(path: str | Path) -> dict[str, Any]:
    """``{"model", "gpu", "tensor_parallel_size"}`` a calibration file is for, as
    ``kvsim run`` / ``kvsim budget`` take them when ``--model``, ``--gpu`` or
    ``--tensor-parallel-size`` is not given. ``CalibrationError`` on a bad file."""
    if is_efficiency_file(path):
        return {"gpu": load_efficiency(path).gpu.name}
    cal = load_calibration(path)
    return {
        "model": cal.model.name,
        "gpu": cal.gpu.catalog_name or cal.gpu.name,
        "tensor_parallel_size": cal.tensor_parallel_size,
    }


def calibrated_budget(cal: Calibration, model: ModelSpec, gpu: GPUSpec, engine: object) -> KVBudget:
    """``engine_kv_budget`` with the calibration's measured memory terms."""
    measured = MeasuredMemoryTerms.from_profile(cal.kv_budget)
    return engine_kv_budget(model, gpu, engine, measured=measured)


def resolve_efficiency(path: str | Path, gpu: str) -> tuple[EfficiencyCalibration, GPUSpec]:
    """(efficiency calibration, its GPU) for a run that asks for ``gpu`` (a name, or a
    GPU YAML whose ``name`` is the file's GPU)."""
    cal = load_efficiency(path)
    asked = gpu
    if norm_name(gpu) != norm_name(cal.gpu.name) and Path(gpu).suffix in (".yaml", ".yml"):
        asked = load_gpu(gpu).name
    if norm_name(asked) != norm_name(cal.gpu.name):
        raise CalibrationError(
            f"--calibration {path}: the file is for GPU {cal.gpu.name!r}, not {gpu!r}; "
            f"pass --gpu {cal.gpu.name} or fit a trace of this GPU"
        )
    return cal, cal.gpu


def budget_inputs(
    calibration: str | Path | None, model: str, gpu: str, tensor_parallel_size: int
) -> tuple[Calibration | EfficiencyCalibration | None, ModelSpec, GPUSpec, Callable[..., KVBudget]]:
    """``(calibration or None, model spec, GPU spec, budget function)`` of a run: the
    catalog's specs and ``engine_kv_budget``; with a calibration file, its specs and
    :func:`calibrated_budget` on its measured memory terms; with an efficiency file
    (``kvsim calibrate --from-trace``), the catalog's model, the file's GPU and
    ``engine_kv_budget`` (the file holds step-time factors only). The budget function
    takes ``(model spec, GPU spec, engine configuration)``."""
    if calibration is None:
        return None, load_model(model), load_gpu(gpu), engine_kv_budget
    if is_efficiency_file(calibration):
        eff, hw = resolve_efficiency(calibration, gpu)
        return eff, load_model(model), hw, engine_kv_budget
    cal, spec, hw = resolve_calibrated(calibration, model, gpu, tensor_parallel_size)
    return cal, spec, hw, partial(calibrated_budget, cal)


def calibrated_latency(cal: Calibration, path: str | Path) -> FittedLatencyModel:
    """The fitted step-time model of ``cal``."""
    return FittedLatencyModel(cal, str(path))
