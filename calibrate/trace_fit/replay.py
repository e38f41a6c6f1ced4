"""One replay of a trace with given efficiency factors: its steps and request times.

The trace runs through the full simulation (kvcore's scheduler, the engine loop the
engine configuration picks, the cluster's router) with fast-forward off and one
:class:`RecordingLatency` around the roofline per replica, so every step's roofline
terms are known along with its start and duration, and every request's simulated
arrival, first-token and finish times.

A replica's steps form one time line, except for a MoE model's DP ranks, which step in
lockstep (:mod:`sim.engine.dp_lockstep`): their group has one line of forward passes, each as
long as its slowest rank's step, so its terms are that rank's, and a rank's request
spans the group's forwards (a forward it sat out, on a dummy batch, included).
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
from sim.app.run import RunSpec, simulate
from sim.app.setup import resolve_run


@dataclass(frozen=True)
class StepLine:
    """The steps of one time line (in order); times in simulated seconds."""

    starts: np.ndarray
    durations: np.ndarray
    terms: np.ndarray
    """``[steps, len(TERMS)]``: each step's roofline terms (``calibrate.roofline_terms``)."""


@dataclass(frozen=True)
class Replay:
    """The time lines and requests of one replay."""

    lines: list[StepLine]
    line_of_replica: list[int]
    """The line each replica's requests ran on."""
    requests: pd.DataFrame
    """``requests.csv``: ``request_id``, ``replica``, ``arrival_s``, ``first_token_s``,
    ``finish_s``, ``prompt_tokens``, ``output_tokens``, ..."""


def replay(spec: RunSpec, efficiency: RooflineEfficiency) -> Replay:
    """Simulate ``spec`` with the roofline at ``efficiency`` on every replica."""
    resolved = resolve_run(dataclasses.replace(spec, steps="full", steps_format="csv"))
    if resolved.pd is not None:
        raise ValueError("--from-trace fits one deployment of whole engines: drop --pd")
    base = resolved.latency_model
    if not isinstance(base, RooflineLatencyModel):
        raise ValueError("--from-trace fits the roofline latency model: drop --latency-model")
    model = base.with_efficiency(efficiency)
    recorders = tuple(RecordingLatency(model) for _ in range(spec.num_replicas))
    resolved = dataclasses.replace(
        resolved, latency_model=recorders[0], replica_latency_models=recorders
    )
    with tempfile.TemporaryDirectory(prefix="kvsim-fit-") as tmp:
        out = Path(tmp)
        simulate(
            resolved, out, num_replicas=spec.num_replicas, router=spec.router,
            fast_forward=False, helpers=False,
        )  # fmt: skip
        steps = pd.read_csv(out / "steps.csv", usecols=["replica", "start_s", "duration_s"])
        requests = pd.read_csv(out / "requests.csv", dtype={"request_id": str})
    per_replica = [_replica_steps(steps, r, rec) for r, rec in enumerate(recorders)]
    dp = resolved.engine.data_parallel_size if resolved.dp_lockstep else 1
    lines = [_group_line(per_replica[g * dp : (g + 1) * dp]) for g in range(len(recorders) // dp)]
    return Replay(lines, [r // dp for r in range(len(recorders))], requests)


def _replica_steps(
    steps: pd.DataFrame, replica: int, recorder: RecordingLatency
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(starts, durations run, durations asked, terms)`` of one replica's steps: what
    its recorder was asked, step by step, beside what the engine ran."""
    mine = steps[steps["replica"] == replica]
    run = mine["duration_s"].to_numpy(np.float64)
    asked = np.asarray(recorder.durations, dtype=np.float64)
    # a DP rank's step lasts its group's forward, at least its own step time
    if len(asked) != len(run) or np.any(asked > run * (1 + 1e-6) + 1e-12):
        raise RuntimeError(
            f"replay: replica {replica} asked for {len(asked)} step times and ran "
            f"{len(run)} steps: the engine timed steps it did not run (fast-forward on?)"
        )
    return mine["start_s"].to_numpy(np.float64), run, asked, recorder.matrix()


def _group_line(
    ranks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
) -> StepLine:
    """One time line of the ranks' steps: a replica's own, or a lockstep group's forward
    passes (the steps that start together are one forward, whose terms are those of the
    rank with the longest step time of its own)."""
    if len(ranks) == 1:
        starts, run, asked, terms = ranks[0]
        if not np.allclose(asked, run, rtol=1e-6):
            raise RuntimeError("replay: the step times run differ from those asked for")
        return StepLine(starts, asked, terms)  # asked: full precision (steps.csv has 9 digits)
    starts = np.concatenate([r[0] for r in ranks])
    asked = np.concatenate([r[2] for r in ranks])
    terms = np.concatenate([r[3] for r in ranks])
    # by start, then the longest own step first: the first step of each start is the
    # forward's slowest rank, whose step time is the forward's
    order = np.lexsort((-asked, starts))
    starts, asked, terms = starts[order], asked[order], terms[order]
    first = np.concatenate([[True], np.diff(starts) > 0])
    return StepLine(starts[first], asked[first], terms[first])
