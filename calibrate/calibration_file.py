"""The calibration file (YAML, ``schema_version`` 1) and the fitted latency model.

One file records one (model, GPU, dtype, TP, kernel backend) calibration: the model's
full spec and the layers actually profiled, the device as measured (name, memory,
properties) with the nominal peaks the features were normalized by, software versions,
the fitted coefficients of ``calibrate.step_features.FEATURES`` with holdout errors and
residual quantiles, and every term of the memory profile (``ProfileResult``) with the
resulting ``num_gpu_blocks``. Pure numpy/pydantic: the simulator imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from calibrate import yaml_load
from calibrate.gpu_spec import GPUSpec
from calibrate.latency_interface import LatencyModel, as_decode_arrays, as_token_arrays
from calibrate.model_spec import ModelSpec
from calibrate.step_features import FEATURES, StepFeatures

SCHEMA_VERSION = 1


class CalibrationError(ValueError):
    """A calibration file is unreadable, invalid, or for another model/GPU."""


class _Strict(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)


class ModelSection(_Strict):
    name: str
    spec: ModelSpec
    profiled_num_layers: int = Field(gt=0)


class GPUSection(_Strict):
    name: str = Field(description="device name as measured (torch), or 'cpu'")
    catalog_name: str | None = None
    memory_bytes: int = Field(gt=0, description="total device memory as measured, bytes")
    properties: dict[str, Any] = Field(default_factory=dict)
    bf16_tflops: float = Field(gt=0, description="nominal peak the features used, TFLOP/s")
    fp16_tflops: float = Field(gt=0)
    hbm_bandwidth_gbps: float = Field(gt=0, description="nominal bandwidth, GB/s")
    interconnect_bandwidth_gbps: float = Field(gt=0)

    def as_gpu_spec(self) -> GPUSpec:
        return GPUSpec(
            name=self.catalog_name or self.name,
            memory_gb=self.memory_bytes / 1e9,
            memory_bytes=self.memory_bytes,
            bf16_tflops=self.bf16_tflops,
            fp16_tflops=self.fp16_tflops,
            hbm_bandwidth_gbps=self.hbm_bandwidth_gbps,
            interconnect_bandwidth_gbps=self.interconnect_bandwidth_gbps,
            source="calibration file",
        )


class LatencySection(_Strict):
    features: list[str]
    coefficients: dict[str, float]
    holdout_mape: dict[str, float]
    train_mape: dict[str, float]
    residual_quantiles: dict[str, float]
    num_train: int = Field(ge=0)
    num_holdout: int = Field(ge=0)
    timing: str
    raw_csv: str | None = None


class Calibration(_Strict):
    """The whole file."""

    schema_version: int
    kind: str = "kvsim-calibration"
    created: str = ""
    device: str
    dtype: str
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = Field(ge=1)
    attention_backend: str
    versions: dict[str, str | None]
    model: ModelSection
    gpu: GPUSection
    latency: LatencySection
    kv_budget: dict[str, Any]


def validation_message(exc: ValidationError, source: str) -> str:
    """The first five errors of ``exc`` as one line, each naming its field."""
    parts = [
        f"field '{'.'.join(str(p) for p in e['loc']) or '(top level)'}': {e['msg']}"
        for e in exc.errors()
    ]
    return f"{source}: " + "; ".join(parts[:5])


def read_versioned(path: str | Path, kind: str, version: int, what: str) -> dict[str, Any]:
    """The YAML mapping of a kvsim file of ``kind`` (its ``kind`` key) at ``path``, at
    schema ``version``; ``CalibrationError`` (naming ``--calibration`` and the file, and
    ``what`` the file should be) otherwise."""
    try:
        raw = yaml_load.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CalibrationError(f"--calibration {path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise CalibrationError(f"--calibration {path}: not UTF-8 text (not {what})") from None
    except yaml.YAMLError as exc:
        raise CalibrationError(f"--calibration {path}: not valid YAML ({exc})") from None
    if not isinstance(raw, dict) or raw.get("kind") != kind:
        raise CalibrationError(f"--calibration {path}: not {what}")
    if raw.get("schema_version") != version:
        raise CalibrationError(
            f"--calibration {path}: schema_version {raw.get('schema_version')!r} is not "
            f"supported (this kvsim reads {version})"
        )
    return raw


def load_calibration(path: str | Path) -> Calibration:
    """Read and validate a calibration file; ``CalibrationError`` names the problem."""
    raw = read_versioned(path, "kvsim-calibration", SCHEMA_VERSION, "a kvsim calibration file")
    try:
        cal = Calibration.model_validate(raw)
    except ValidationError as exc:
        raise CalibrationError(validation_message(exc, f"--calibration {path}")) from None
    missing = set(FEATURES) - set(cal.latency.coefficients)
    if missing:
        raise CalibrationError(
            f"--calibration {path}: field 'latency.coefficients' lacks {sorted(missing)}"
        )
    for key in ("num_gpu_blocks", "total_memory_bytes", "weights_bytes", "available_kv_bytes"):
        if key not in cal.kv_budget:
            raise CalibrationError(f"--calibration {path}: field 'kv_budget.{key}' is missing")
    return cal


def save_calibration(cal: Calibration, path: str | Path) -> None:
    """Write ``cal`` as YAML."""
    data = cal.model_dump(mode="json")
    Path(path).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def norm_name(name: str) -> str:
    """A model or GPU name compared case-insensitively, without its org prefix."""
    return name.lower().split("/")[-1]


def check_matches(cal: Calibration, model: ModelSpec | None, gpu: str | None, source: str) -> None:
    """Raise ``CalibrationError`` unless ``cal`` is for ``model`` (name and shape) and
    ``gpu`` (catalog name or measured device name)."""
    want = cal.model.spec
    if model is not None:
        same_shape = all(
            getattr(model, f) == getattr(want, f)
            for f in ("num_layers", "hidden_size", "num_kv_heads", "head_size", "layer_types")
        )
        if norm_name(model.name) != norm_name(want.name) or not same_shape:
            raise CalibrationError(
                f"--calibration {source}: the file is for model {want.name!r}, not "
                f"{model.name!r}; pass --model {want.name} or calibrate this model"
            )
    if gpu is not None:
        names = {norm_name(cal.gpu.name)}
        if cal.gpu.catalog_name:
            names.add(norm_name(cal.gpu.catalog_name))
        if norm_name(gpu) not in names:
            label = cal.gpu.catalog_name or cal.gpu.name
            raise CalibrationError(
                f"--calibration {source}: the file is for GPU {label!r}, not {gpu!r}; pass "
                f"--gpu {label} or calibrate on this GPU"
            )


class FittedLatencyModel(LatencyModel):
    """``t = sum_k beta_k * feature_k`` with a calibration's coefficients (seconds)."""

    kind = "fitted"

    def __init__(self, cal: Calibration, source: str = "") -> None:
        self.cal, self.source = cal, source
        self.features = StepFeatures(
            cal.model.spec, cal.gpu.as_gpu_spec(), cal.tensor_parallel_size, cal.kv_cache_dtype
        )
        self.coef = np.array([cal.latency.coefficients[f] for f in FEATURES])

    def step_time(self, new_tokens: np.ndarray, context_tokens: np.ndarray) -> float:
        new, ctx = as_token_arrays(new_tokens, context_tokens)
        return float(self.features.step(new, ctx) @ self.coef)

    def decode_step_times(
        self,
        batch_sizes: np.ndarray,
        total_context: np.ndarray,
        windowed_context: Mapping[int, np.ndarray] | None = None,
    ) -> np.ndarray:
        b, k = as_decode_arrays(batch_sizes, total_context)
        return self.features.decode(b, k, windowed_context) @ self.coef

    def describe(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "calibration": self.source,
            "model": self.cal.model.name,
            "gpu": self.cal.gpu.catalog_name or self.cal.gpu.name,
            "tensor_parallel_size": self.cal.tensor_parallel_size,
            "coefficients": dict(self.cal.latency.coefficients),
            "holdout_mape": dict(self.cal.latency.holdout_mape),
        }
