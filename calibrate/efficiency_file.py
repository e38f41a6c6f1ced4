"""The efficiency calibration file (YAML, ``kind: kvsim-efficiency``, ``schema_version``
1): a GPU's roofline efficiency factors fitted to a real server's request times
(``kvsim calibrate --from-trace``).

Unlike the harness's calibration file (one model, one tensor-parallel size), it describes
the GPU and the engine: ``kvsim run --calibration`` applies it to any model and any
tensor-parallel size on that GPU (the roofline's shapes come from the model; the KV
budget from the catalog). It records the GPU's spec as used (so a GPU YAML outside the
catalog needs no second copy), the fitted factors, the prior they started from, the
run they were fitted on (trace file with its sha256, model, tensor-parallel size,
engine arguments), the errors of a replay before and after the fit, and how much the
runs decided each factor (``data_share``, 0 to 1: what is near 0 the prior set).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from calibrate import yaml_load
from calibrate.calibration_file import CalibrationError, read_versioned, validation_message
from calibrate.gpu_spec import GPUSpec
from calibrate.roofline import RooflineEfficiency

KIND = "kvsim-efficiency"
SCHEMA_VERSION = 1


class FittedOn(BaseModel):
    """One measured run a fit used, and a replay's errors on it before and after."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    trace: str
    sha256: str
    model: str
    tensor_parallel_size: int = Field(ge=1)
    engine: dict[str, Any]
    num_replicas: int = Field(default=1, ge=1, description="engines the run had")
    router: str = "round_robin"
    num_requests: int = Field(ge=1)
    errors: dict[str, dict[str, float]] = Field(
        description="'prior' and 'fitted': signed relative errors of a replay's means "
        "(ttft_mean, tpot_mean, e2e_mean) and the mean squared relative error per request"
    )


class EfficiencyCalibration(BaseModel):
    """A whole efficiency calibration file (see the module docstring)."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    kind: str = KIND
    schema_version: int = SCHEMA_VERSION
    kvsim_version: str
    gpu: GPUSpec
    efficiency: dict[str, float]
    prior: dict[str, float]
    fitted_on: list[FittedOn] = Field(min_length=1)
    iterations: list[dict[str, float]] = Field(
        default_factory=list, description="each round's factors and objective"
    )
    data_share: dict[str, float] = Field(
        default_factory=dict,
        description="per factor, how much the runs decided it rather than the prior "
        "(0 to 1; calibrate.trace_fit.solve.data_shares)",
    )

    def factors(self) -> RooflineEfficiency:
        """The fitted factors."""
        return RooflineEfficiency(**self.efficiency)


def sha256_of(path: Path) -> str:
    """The file's sha256, hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def is_efficiency_file(path: str | Path) -> bool:
    """Whether ``path`` reads as YAML with ``kind: kvsim-efficiency`` (False when it
    cannot be read: the caller's own loader says why)."""
    try:
        raw = yaml_load.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(raw, dict) and raw.get("kind") == KIND


def load_efficiency(path: str | Path) -> EfficiencyCalibration:
    """Read and validate an efficiency file; ``CalibrationError`` names the problem."""
    raw = read_versioned(path, KIND, SCHEMA_VERSION, "a kvsim efficiency file")
    try:
        cal = EfficiencyCalibration.model_validate(raw)
        cal.factors()
    except ValidationError as exc:
        raise CalibrationError(validation_message(exc, f"--calibration {path}")) from None
    except (TypeError, ValueError) as exc:
        raise CalibrationError(f"--calibration {path}: field 'efficiency': {exc}") from None
    return cal


def write_efficiency(cal: EfficiencyCalibration, path: Path) -> None:
    """Write ``cal`` as YAML to ``path``."""
    path.write_text(yaml.safe_dump(cal.model_dump(), sort_keys=False), encoding="utf-8")
