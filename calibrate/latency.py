"""Latency models for the engine loop (pure numpy): what one engine step costs.

``LatencyModel`` is the interface (``calibrate.latency_interface``); kinds:

* ``roofline`` (default): ``RooflineLatencyModel`` from the GPU and model catalog
  (``calibrate.roofline``), with default efficiency factors;
* ``constant``: ``ConstantLatencyModel(step_s)``, every non-empty step the same (tests,
  conformance);
* ``fitted``: coefficients from a calibration file written by ``kvsim calibrate``
  (``calibrate.calibration_file.FittedLatencyModel``); a file for another model or GPU
  than the one asked for raises ``CalibrationError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from calibrate.gpu_spec import GPUSpec
from calibrate.latency_interface import LatencyModel, as_decode_arrays, as_token_arrays
from calibrate.model_spec import ModelSpec
from calibrate.roofline import RooflineEfficiency, RooflineLatencyModel

LATENCY_MODEL_KINDS = ("roofline", "constant", "fitted")

__all__ = [
    "LATENCY_MODEL_KINDS",
    "ConstantLatencyModel",
    "LatencyModel",
    "RooflineEfficiency",
    "RooflineLatencyModel",
    "load_fitted_latency_model",
    "make_latency_model",
]


class ConstantLatencyModel(LatencyModel):
    """Every step that schedules at least one token takes ``step_s`` seconds."""

    kind = "constant"

    def __init__(self, step_s: float) -> None:
        if not (isinstance(step_s, (int, float)) and np.isfinite(step_s) and step_s > 0):
            raise ValueError(f"step_s must be a positive number of seconds, got {step_s!r}")
        self.step_s = float(step_s)

    def step_time(self, new_tokens: np.ndarray, context_tokens: np.ndarray) -> float:
        new, _ = as_token_arrays(new_tokens, context_tokens)
        return self.step_s if new.sum() > 0 else 0.0

    def decode_step_times(
        self,
        batch_sizes: np.ndarray,
        total_context: np.ndarray,
        windowed_context: Mapping[int, np.ndarray] | None = None,
    ) -> np.ndarray:
        b, _ = as_decode_arrays(batch_sizes, total_context)
        return np.where(b > 0, self.step_s, 0.0)

    def describe(self) -> dict[str, object]:
        return {"kind": self.kind, "step_s": self.step_s}


def load_fitted_latency_model(
    path: str | Path,
    *,
    model: ModelSpec | None = None,
    gpu: GPUSpec | None = None,
    **_: Any,
) -> LatencyModel:
    """The fitted model stored in calibration file ``path``; with ``model`` / ``gpu``
    given, a file for another model or GPU raises ``CalibrationError``."""
    from calibrate.calibration_file import FittedLatencyModel, check_matches, load_calibration

    cal = load_calibration(path)
    check_matches(cal, model, gpu.name if gpu is not None else None, str(path))
    return FittedLatencyModel(cal, str(path))


def make_latency_model(
    kind: str = "roofline",
    *,
    model: ModelSpec | None = None,
    gpu: GPUSpec | None = None,
    tensor_parallel_size: int = 1,
    step_s: float | None = None,
    calibration: str | Path | None = None,
    efficiency: RooflineEfficiency | None = None,
    kv_cache_dtype: str = "auto",
    data_parallel_size: int = 1,
    cudagraph_sizes: tuple[int, ...] = (),
) -> LatencyModel:
    """The latency model of ``kind``.

    ``roofline`` needs ``model`` and ``gpu`` (``efficiency`` overrides the factors the
    catalog ships for that GPU, :mod:`calibrate.gpu_efficiency`, else the generic
    defaults; ``data_parallel_size``: an MoE model's DP group; ``cudagraph_sizes``: the
    token counts with a captured CUDA graph, :mod:`calibrate.cudagraph_sizes`); ``constant`` needs
    ``step_s`` (seconds); ``fitted`` needs ``calibration`` (a file path;
    ``model``/``gpu``, when given, must match it). Bad arguments raise ValueError naming
    the argument.
    """
    if kind == "roofline":
        if model is None or gpu is None:
            raise ValueError("latency model 'roofline' needs a model and a gpu")
        source = None
        if efficiency is None:
            from calibrate.gpu_efficiency import gpu_efficiency

            shipped = gpu_efficiency(gpu)
            if shipped is not None:
                efficiency, source = shipped
        return RooflineLatencyModel(
            model, gpu, tensor_parallel_size, efficiency, kv_cache_dtype, data_parallel_size,
            efficiency_source=source, cudagraph_sizes=cudagraph_sizes,
        )  # fmt: skip
    if kind == "constant":
        if step_s is None:
            raise ValueError("latency model 'constant' needs step_s (seconds per step)")
        return ConstantLatencyModel(step_s)
    if kind == "fitted":
        if calibration is None:
            raise ValueError("latency model 'fitted' needs a calibration file")
        return load_fitted_latency_model(
            calibration, model=model, gpu=gpu, tensor_parallel_size=tensor_parallel_size
        )
    raise ValueError(
        f"latency model kind: unknown {kind!r}; allowed: {', '.join(LATENCY_MODEL_KINDS)}"
    )
