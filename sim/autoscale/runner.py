"""``kvsim autoscale``: replicas over time for a time-varying workload.

1. The workload's arrivals, window by window (:mod:`sim.autoscale.windows`).
2. One replica's capacity per window: ``replica_rate``, or ``kvsim plan --question
   max_rate`` under the SLOs, once per request mix (:mod:`sim.autoscale.mix`;
   ``replica-plan/mix-K``).
3. Replicas per window and each replica's plan (:mod:`sim.autoscale.schedule`).
4. Two simulations of the whole workload: the autoscaled cluster, whose router sends
   each request only to the replicas routable at its arrival (``autoscaled/``), and a
   fixed cluster of the peak number of replicas (``peak/``).
5. ``autoscale.json``: the schedule, GPU-hours and GPUs (peak, mean) of both, SLO
   figures over the whole run and per window (:mod:`sim.autoscale.costs`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from kvcore import __version__
from sim.app.engine_config import EngineConfig
from sim.app.outdir import check_output, write_marker
from sim.app.run import RunSpec, run
from sim.app.setup import resolve_run
from sim.autoscale.costs import (
    billed_intervals,
    gpu_seconds,
    meets,
    peak_concurrent,
    slo_figures,
    window_attainment,
)
from sim.autoscale.mix import empirical_workload, group_windows, same_mix
from sim.autoscale.router import ScheduledRouter
from sim.autoscale.schedule import Schedule, build_schedule, replicas_needed
from sim.autoscale.windows import Arrivals, Window, arrival_windows, draw_arrivals
from sim.engine.router import make_router
from sim.records.slo import SLO
from workloads.loader import YAML_SUFFIXES, preset_path
from workloads.spec_lengths import absolute_empirical_paths

LOAD_BYTES_PER_S = 2e9
"""Weights load speed assumed for a starting replica (bytes/s per GPU)."""
WARMUP_S = 60.0
"""Start-up beyond loading weights (engine start, compile, CUDA-graph capture), s."""


@dataclass
class AutoscaleSpec:
    """What ``kvsim autoscale`` was asked (seconds, req/s)."""

    workload: str
    model: str
    gpu: str
    engine: EngineConfig = field(default_factory=EngineConfig)
    seed: int | None = None
    router: str = "round_robin"
    slo: SLO | None = None
    replica_rate: float | None = None
    window_s: float = 300.0
    headroom: float = 0.0
    min_replicas: int = 1
    scale_up_delay_s: float | None = None
    scale_down_delay_s: float = 0.0
    lead_s: float = 0.0
    plan_num_requests: int | None = None


def startup_seconds(weights_bytes: float) -> float:
    """A replica's start time: its weights per GPU at :data:`LOAD_BYTES_PER_S` plus
    :data:`WARMUP_S`."""
    return float(weights_bytes) / LOAD_BYTES_PER_S + WARMUP_S


def _poisson_workload(source: Path, path: Path) -> Path:
    """A copy of the YAML workload ``source`` with Poisson arrivals, for the capacity
    plan (its empirical length files named by absolute paths: the copy lives elsewhere)."""
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    absolute_empirical_paths(data, source.parent)
    data["arrival"] = {"type": "poisson", "rate": 1.0}
    for key in ("num_requests", "duration_s"):
        data.pop(key, None)
    data["num_requests"] = 1000
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def replica_capacities(
    spec: AutoscaleSpec, out: Path, arrivals: Arrivals, windows: list[Window]
) -> tuple[list[float], list[int], list[dict[str, Any]]]:
    """``(capacity per window, mix group per window, the plans' results)``: the given
    rate for every window, or a max_rate plan's answer per mix group
    (:mod:`sim.autoscale.mix`), each in ``replica-plan/mix-K``."""
    if spec.replica_rate is not None:
        return [spec.replica_rate] * len(windows), [0] * len(windows), []
    if spec.slo is None:
        raise ValueError("give --replica-rate, or SLO flags to plan one replica's capacity")
    from sim.plan.runner import run_plan
    from sim.plan.spec import PlanSpec

    groups = group_windows(arrivals, windows, spec.window_s)
    source = preset_path(spec.workload) or Path(spec.workload)
    inputs = out / "replica-plan-workloads"
    inputs.mkdir(parents=True, exist_ok=True)
    capacity = [0.0] * len(windows)
    member = [0] * len(windows)
    docs = []
    for k, group in enumerate(groups):
        name = f"mix-{k}"
        if len(groups) == 1 and source.suffix in YAML_SUFFIXES:
            workload = _poisson_workload(source, inputs / f"{name}.yaml")
        else:
            workload = empirical_workload(group, name, spec.seed or 0, inputs)
        plan = PlanSpec(
            workload=str(workload), model=spec.model, gpu=spec.gpu, engine=spec.engine,
            slo=spec.slo, question="max_rate", num_requests=spec.plan_num_requests,
        )  # fmt: skip
        out.joinpath("replica-plan").mkdir(exist_ok=True)
        doc = run_plan(plan, out / "replica-plan" / name, source="autoscale")
        if doc["answer"] is None:
            raise ValueError(
                f"the capacity plan of {name} (windows {list(group.windows)}) found no rate "
                "meeting the SLOs on one replica"
            )
        docs.append(doc)
        for i in group.windows:
            capacity[i], member[i] = float(doc["answer"]), k
    return capacity, member, docs


def _mix_marks(windows: list[Window], prompt: float, output: float) -> list[bool]:
    """Per window: whether its mix is another than the whole workload's."""
    return [
        w.num_requests > 0
        and not (same_mix(w.mean_prompt_tokens, prompt) and same_mix(w.mean_output_tokens, output))
        for w in windows
    ]


def _cluster_doc(
    schedule: Schedule | None, requests: pd.DataFrame, peak: int, tp: int, slo: SLO | None
) -> dict[str, Any]:
    """One cluster's figures: GPU-hours and GPUs (peak, mean) billed, and its SLO
    figures over the whole run and (autoscaled, ``schedule`` given) per window."""
    end = float(requests["finish_s"].max())
    if schedule is None:
        spans = [[(0.0, end)] for _ in range(peak)]
    else:
        spans = billed_intervals(schedule, requests, end)
    gpu_s = gpu_seconds(spans, tp)
    figures = slo_figures(requests)
    doc: dict[str, Any] = {
        "gpu_hours": gpu_s / 3600.0,
        "peak_gpus": peak_concurrent(spans) * tp,
        "mean_gpus": gpu_s / end,
        "duration_s": end,
        "slo_figures": figures,
        "meets_slo": meets(figures, slo),
    }
    if schedule is not None:
        per = window_attainment(schedule, requests, slo)
        judged = [w["meets_slo"] for w in per if w["meets_slo"] is not None]
        doc["windows"] = per
        doc["windows_meeting_slo"] = sum(judged) if judged else None
        doc["windows_judged"] = len(judged)
    return doc


def run_autoscale(
    spec: AutoscaleSpec, out: Path, force: bool = False, dry_run: bool = False
) -> dict[str, Any]:
    """Plan, schedule and simulate (see the module docstring); write ``autoscale.json``
    into ``out`` and return its document. ``dry_run``: the schedule only (needs
    ``replica_rate``), nothing simulated or written."""
    arrivals = draw_arrivals(spec.workload, spec.seed)
    windows = arrival_windows(arrivals, spec.window_s)
    base = RunSpec(
        workload=spec.workload, model=spec.model, gpu=spec.gpu, engine=spec.engine,
        seed=spec.seed, router=spec.router, steps="thin",
    )  # fmt: skip
    resolved = resolve_run(base)
    if spec.replica_rate is None and (spec.slo is None or dry_run):
        raise ValueError(
            "give --replica-rate"
            + ("" if dry_run else ", or SLO flags to plan one replica's capacity")
        )
    if not dry_run:
        check_output(out, "autoscale", force=force)
        out.mkdir(parents=True, exist_ok=True)
        write_marker(out, "autoscale")
    rates, member, plans = replica_capacities(spec, out, arrivals, windows)
    need = replicas_needed(windows, rates, spec.headroom, spec.min_replicas)
    delay = spec.scale_up_delay_s
    if delay is None:
        delay = startup_seconds(resolved.budget_terms["weights_bytes"])
    schedule = build_schedule(
        windows, need, scale_up_delay_s=delay,
        scale_down_delay_s=spec.scale_down_delay_s, lead_s=spec.lead_s,
    )  # fmt: skip
    peak, tp = schedule.peak, spec.engine.tensor_parallel_size
    marks = _mix_marks(
        windows, float(arrivals.prompt_tokens.mean()), float(arrivals.output_tokens.mean())
    )
    doc: dict[str, Any] = {
        "kvsim_version": __version__,
        "workload": spec.workload,
        "model": resolved.model_name,
        "gpu": resolved.gpu_name,
        "tensor_parallel_size": tp,
        "slo": None if spec.slo is None else spec.slo.bounds(),
        "replica_rate": min(rates),
        "replica_rate_source": (
            "given" if not plans else f"plan per request mix ({len(plans)}: replica-plan/)"
        ),
        "window_s": spec.window_s,
        "headroom": spec.headroom,
        "scale_up_delay_s": delay,
        "scale_down_delay_s": spec.scale_down_delay_s,
        "lead_s": spec.lead_s,
        "schedule": _schedule_rows(windows, need, marks, rates, member),
    }
    if dry_run:
        return doc
    frames = _simulate_both(spec, base, schedule, out)
    doc["autoscaled"] = _cluster_doc(schedule, frames["autoscaled"], peak, tp, spec.slo)
    doc["peak"] = _cluster_doc(None, frames["peak"], peak, tp, spec.slo)
    (out / "autoscale.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return doc


def _schedule_rows(
    windows: list[Window],
    need: list[int],
    marks: list[bool],
    rates: list[float],
    member: list[int],
) -> list[dict[str, Any]]:
    """``autoscale.json``'s ``schedule``: per window its start (s), arrival rate
    (req/s), replicas, one replica's capacity (req/s), mix group and mean lengths."""
    return [
        {
            "start_s": w.start_s,
            "rate": w.rate,
            "replicas": n,
            "replica_rate": r,
            "mix_group": g,
            "mean_prompt_tokens": w.mean_prompt_tokens,
            "mean_output_tokens": w.mean_output_tokens,
            "mix_differs": mark,
        }
        for w, n, mark, r, g in zip(windows, need, marks, rates, member)
    ]


def _simulate_both(
    spec: AutoscaleSpec, base: RunSpec, schedule: Schedule, out: Path
) -> dict[str, pd.DataFrame]:
    """Run the whole workload on the peak number of replicas twice: routed by the
    schedule (``autoscaled/``) and all of them always (``peak/``); each run's
    ``requests.csv`` by name."""
    cluster = dataclasses.replace(base, num_replicas=schedule.peak)
    router = ScheduledRouter(make_router(spec.router), schedule)
    run(cluster, out / "autoscaled", render=False, force=True, router=router)
    run(cluster, out / "peak", render=False, force=True)
    return {
        name: pd.read_csv(out / name / "requests.csv", dtype={"request_id": str})
        for name in ("autoscaled", "peak")
    }
