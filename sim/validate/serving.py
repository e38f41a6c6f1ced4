"""Replay real vLLM serving runs and report kvsim's signed errors per run.

The runs are LLMServingSim's four public vLLM 0.19.0 runs (``tests/data/llmservingsim``:
300 requests each, pinned output lengths; see its PROVENANCE.md), each with the engine
settings it was started with (vLLM's defaults where it passed none: utilization 0.9,
block 16, prefix caching and chunked prefill on) and, where the run recorded it, its
measured block count. Errors compare means of engine-side times (TTFT from the engine's
queued timestamp, TPOT over the decode interval, E2E) as
``calibrate.trace_fit.fit.errors`` defines them. The Qwen3-30B-A3B run (DP 2 with
expert parallelism) is replayed as two DP ranks whose MoE layers share the experts
(``calibrate.roofline``), stepping in lockstep (:mod:`sim.engine.dp_lockstep`).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.roofline import RooflineEfficiency
from calibrate.trace_fit.cli import measured_requests
from calibrate.trace_fit.fit import errors
from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec, simulate
from sim.app.setup import resolve_run

REPO = Path(__file__).resolve().parents[2]
GROUND_TRUTH = REPO / "scripts" / "ground_truth"
PRO6000 = "RTX-PRO-6000"
DATA = REPO / "tests" / "data" / "llmservingsim"
METRICS = ("ttft_mean", "tpot_mean", "e2e_mean")


@dataclass(frozen=True)
class ServingRun:
    """A real run and how kvsim replays it."""

    name: str
    model: str
    gpu: str
    engine: EngineConfig
    num_replicas: int = 1
    router: str = "round_robin"
    note: str = ""


def _engine(**kw: object) -> EngineConfig:
    return EngineConfig(max_num_batched_tokens=2048, **kw)


RUNS: tuple[ServingRun, ...] = (
    ServingRun(
        "RTX4090_Llama-3.1-8B", "Llama-3.1-8B", "RTX-4090",
        _engine(max_num_seqs=256, max_model_len=32768, num_gpu_blocks_override=2588),
        note="2588 blocks as meta.json records",
    ),
    ServingRun(
        "RTXPRO6000_Llama-3.1-8B", "Llama-3.1-8B", PRO6000,
        _engine(max_num_seqs=128, gpu_memory_utilization=0.9),
    ),
    ServingRun(
        "RTXPRO6000_Qwen3-32B", str(GROUND_TRUTH / "Qwen3-32B.json"), PRO6000,
        _engine(max_num_seqs=128, gpu_memory_utilization=0.9, tensor_parallel_size=2),
    ),
    ServingRun(
        "RTXPRO6000_Qwen3-30B-A3B-Instruct-2507",
        str(GROUND_TRUTH / "Qwen3-30B-A3B-Instruct-2507.json"), PRO6000,
        _engine(
            max_num_seqs=128, gpu_memory_utilization=0.9,
            data_parallel_size=2, enable_expert_parallel=True,
        ),
        num_replicas=2, router="least_outstanding",
        note="DP 2 with expert parallelism: two replicas sharing the experts",
    ),
)  # fmt: skip


@dataclass
class ServingValidation:
    """Per-run signed errors (fractions) and the median of their magnitudes."""

    rows: list[dict[str, object]] = field(default_factory=list)

    def medians(self) -> dict[str, float]:
        """Median ``|error|`` per metric over the runs."""
        return {
            m: float(np.median([abs(float(r[m])) for r in self.rows]))  # type: ignore[arg-type]
            for m in METRICS
        }


def replay_run(
    run: ServingRun,
    data: Path,
    calibration: str | None = None,
    efficiency: RooflineEfficiency | None = None,
) -> dict[str, float]:
    """Replay ``run`` (its request log under ``data``) and return its errors; with
    ``efficiency``, on those roofline factors instead of the GPU's (e.g. the generic
    ``RooflineEfficiency()``, what a GPU without a shipped fit gets)."""
    log = data / run.name / "requests.jsonl"
    spec = RunSpec(
        workload=str(log), model=run.model, gpu=run.gpu, engine=run.engine,
        num_replicas=run.num_replicas, router=run.router, calibration=calibration,
    )  # fmt: skip
    resolved = resolve_run(spec)
    if efficiency is not None:
        latency = resolved.latency_model.with_efficiency(efficiency)
        resolved = replace(resolved, latency_model=latency, latency_description=latency.describe())
    with tempfile.TemporaryDirectory(prefix="kvsim-validate-") as tmp:
        simulate(
            resolved, Path(tmp), num_replicas=run.num_replicas,
            router=run.router, helpers=False, steps_mode="none",
        )  # fmt: skip
        requests = pd.read_csv(Path(tmp) / "requests.csv", dtype={"request_id": str})
    return errors(measured_requests(str(log)).frame(), requests)


def validate_serving(
    data: Path = DATA,
    calibration: dict[str, str] | None = None,
    runs: tuple[ServingRun, ...] = RUNS,
) -> ServingValidation:
    """Replay every run found under ``data``; ``calibration`` maps a GPU (as the runs
    name it) to a calibration file for its runs."""
    out = ServingValidation()
    for run in runs:
        if not (data / run.name / "requests.jsonl").is_file():
            continue
        cal = (calibration or {}).get(run.gpu)
        err = replay_run(run, data, cal)
        out.rows.append({"run": run.name, **{m: err[m] for m in METRICS}, "note": run.note})
    return out
