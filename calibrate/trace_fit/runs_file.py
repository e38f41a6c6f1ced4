"""The runs a ``--from-trace`` fit uses: one request log with the command line's model
and engine, or a YAML file listing several runs of one GPU::

    runs:
      - trace: pro6000-llama8b/requests.jsonl   # relative to this file
        model: Llama-3.1-8B
        engine: {max_num_seqs: 128, max_num_batched_tokens: 2048}
      - trace: pro6000-qwen32b/requests.jsonl
        model: qwen3-32b.json
        tensor_parallel_size: 2
        engine: {max_num_seqs: 128, max_num_batched_tokens: 2048}

Each run's ``engine`` holds vLLM engine arguments as ``kvsim run --engine`` takes them.
A run of several engines (``data_parallel_size`` in ``engine``, or ``num_replicas``
engines behind a ``router``) is replayed as that deployment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from calibrate.calibration_file import validation_message
from sim.app.engine_config import EngineConfig

DP_ROUTER = "least_outstanding"
"""A runs file's default router: vLLM's API server sends each request to the DP rank
with the fewest waiting and running requests (its DP load balancer), which kvsim's
``least_outstanding`` router approximates."""


def default_router(num_replicas: int) -> str:
    """The router a run of ``num_replicas`` engines was replayed behind when its runs
    entry (or the command line) names none: :data:`DP_ROUTER` for several engines."""
    return DP_ROUTER if num_replicas > 1 else "round_robin"


class RunEntry(BaseModel):
    """One run of a runs file."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    trace: str = Field(min_length=1, description="request log, relative to the runs file")
    model: str = Field(min_length=1, description="catalog model or config.json")
    tensor_parallel_size: int = Field(default=1, ge=1)
    engine: dict[str, Any] = Field(default_factory=dict)
    num_replicas: int | None = Field(
        default=None, ge=1, description="engines behind the router; default: the DP size"
    )
    router: str | None = Field(
        default=None,
        description="how requests reached the engines (kvsim's routers); default: "
        f"{DP_ROUTER} for several engines",
    )


class RunsFile(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    runs: list[RunEntry] = Field(min_length=1)


@dataclass(frozen=True)
class FitRun:
    """A measured run to fit: its request log, model and engine."""

    trace: Path
    model: str
    engine: EngineConfig
    num_replicas: int = 1
    """Engines the trace ran on (a DP deployment's ranks, or replicas behind a router)."""
    router: str = "round_robin"


def is_runs_file(path: str) -> bool:
    """A runs file is named ``*.yaml`` / ``*.yml``."""
    return Path(path).suffix in (".yaml", ".yml")


def _resolve(base: Path, name: str) -> str:
    """A model given as a file path is relative to the runs file; a catalog name stays."""
    candidate = base / name
    return os.path.normpath(candidate) if candidate.suffix == ".json" else name


def load_runs(path: str) -> list[FitRun]:
    """The runs of a runs file; ValueError naming the file and field on bad input."""
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"--from-trace {path}: cannot read ({e.strerror})") from None
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"--from-trace {path}: not a YAML runs file ({e})") from None
    try:
        spec = RunsFile.model_validate(raw)
    except ValidationError as e:
        raise ValueError(validation_message(e, f"--from-trace {path}")) from None
    out = []
    for i, run in enumerate(spec.runs):
        try:
            engine = EngineConfig(
                **{**run.engine, "tensor_parallel_size": run.tensor_parallel_size}
            )
        except ValidationError as e:
            raise ValueError(
                validation_message(e, f"--from-trace {path}: runs[{i}].engine")
            ) from None
        trace = Path(os.path.normpath(p.parent / run.trace))
        replicas = run.num_replicas or engine.data_parallel_size
        router = run.router or default_router(replicas)
        out.append(FitRun(trace, _resolve(p.parent, run.model), engine, replicas, router))
    return out
