"""One replay of a trace with given efficiency factors: its steps and request times.

The trace runs through the full simulation (kvcore's scheduler, the engine loop the
engine configuration picks) with fast-forward off and a :class:`RecordingLatency`
around the roofline, so every step's roofline terms are known along with its start and
duration, and every request's simulated arrival, first-token and finish times.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.roofline import RooflineEfficiency, RooflineLatencyModel
from calibrate.trace_fit.recording import RecordingLatency
from sim.run import RunSpec, simulate
from sim.setup import resolve_run


@dataclass(frozen=True)
class Replay:
    """Steps (in order) and requests of one replay; times in simulated seconds."""

    starts: np.ndarray
    durations: np.ndarray
    terms: np.ndarray
    """``[steps, len(TERMS)]``: each step's roofline terms (``calibrate.roofline_terms``)."""
    requests: pd.DataFrame
    """``requests.csv``: ``request_id``, ``arrival_s``, ``first_token_s``, ``finish_s``,
    ``prompt_tokens``, ``output_tokens``, ..."""


def replay(spec: RunSpec, efficiency: RooflineEfficiency) -> Replay:
    """Simulate ``spec`` (one replica) with the roofline at ``efficiency``."""
    if spec.num_replicas != 1:
        raise ValueError("--from-trace fits one engine: give a trace of one replica")
    resolved = resolve_run(dataclasses.replace(spec, steps="full", steps_format="csv"))
    base = resolved.latency_model
    if not isinstance(base, RooflineLatencyModel):
        raise ValueError("--from-trace fits the roofline latency model: drop --latency-model")
    model = RooflineLatencyModel(
        base.model, base.gpu, base.tp, efficiency, resolved.engine.kv_cache_dtype, base.dp
    )
    recorder = RecordingLatency(model)
    resolved = dataclasses.replace(resolved, latency_model=recorder)
    with tempfile.TemporaryDirectory(prefix="kvsim-fit-") as tmp:
        out = Path(tmp)
        simulate(resolved, out, fast_forward=False, helpers=False)
        steps = pd.read_csv(out / "steps.csv", usecols=["start_s", "duration_s"])
        requests = pd.read_csv(out / "requests.csv", dtype={"request_id": str})
    terms = recorder.matrix()
    asked = np.asarray(recorder.durations)
    if len(asked) != len(steps) or not np.allclose(asked, steps["duration_s"], rtol=1e-6):
        raise RuntimeError(
            f"replay: {len(asked)} step times asked for, {len(steps)} steps run: "
            "the engine timed steps it did not run (fast-forward on?)"
        )
    return Replay(
        starts=steps["start_s"].to_numpy(np.float64),
        durations=asked,
        terms=terms,
        requests=requests,
    )
