"""One planning probe: the same configuration run once per seed, judged against SLOs.

A probe's value sets the searched parameter (request rate, replica count or a KV
knob). Each seed's run directory is kept under ``OUT/probes/<param>=<value>/seed_<s>``
beside the workload YAML the probe ran (the plan's workload with ``arrival.rate`` and
``num_requests`` set). A seed passes when its run is steady (see ``sim.verdict``) and
meets every SLO; a probe passes when every seed passes. A saturated run's latencies
are not recorded as metrics (they depend only on how long the run was).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from sim.errors import SimulationStuck
from sim.plan.spec import PlanError, PlanSpec
from sim.run import NothingServed, RunSpec, run
from workloads.errors import WorkloadError
from workloads.loader import YAML_SUFFIXES, load_spec, preset_path
from workloads.spec import WorkloadSpec

PARAM = {"max_rate": "rate", "min_replicas": "num_replicas"}
RATED_ARRIVALS = ("poisson", "gamma", "constant")


def param_name(plan: PlanSpec) -> str:
    """The searched parameter: ``rate``, ``num_replicas`` or the KV knob."""
    return PARAM.get(plan.question, plan.knob)


def is_integer_param(plan: PlanSpec) -> bool:
    """True when the searched parameter takes integer values."""
    return param_name(plan) in ("num_replicas", "num_gpu_blocks", "max_num_seqs")


def load_base_workload(plan: PlanSpec, source: str) -> WorkloadSpec:
    """The plan's workload as a spec whose rate a probe can set; PlanError if not."""
    text = plan.workload
    path = preset_path(text)
    if path is None:
        path = Path(text)
        if path.suffix.lower() not in YAML_SUFFIXES:
            raise PlanError(
                f"{source}: workload: planning needs a preset or a workload YAML spec "
                f"(got {text!r}; traces have no rate to vary)"
            )
    try:
        spec = load_spec(path, text)
    except WorkloadError as e:
        raise PlanError(str(e)) from None
    needs_rate = plan.question == "max_rate" or plan.rate is not None
    if needs_rate and spec.arrival.type not in RATED_ARRIVALS:
        raise PlanError(
            f"{source}: workload: {text} has arrival type {spec.arrival.type!r}; planning "
            f"sets arrival.rate, so it needs one of {', '.join(RATED_ARRIVALS)}"
        )
    return spec


def fmt_value(value: float) -> str:
    """A probe value as text for directory names and tables (4 significant digits)."""
    return f"{value:.4g}" if not float(value).is_integer() else str(int(value))


class ProbeRunner:
    """Runs probes for one plan under ``out``; remembers every probe it ran."""

    def __init__(self, plan: PlanSpec, base: WorkloadSpec, out: Path) -> None:
        self.plan = plan
        self.base = base
        self.out = Path(out)
        self.param = param_name(plan)
        self.probes: list[dict[str, Any]] = []

    def _workload_file(self, rate: float | None, probe_dir: Path) -> Path:
        data = self.base.model_dump(mode="json", exclude_none=True)
        data["name"] = self.base.name or Path(self.plan.workload).stem
        if rate is not None:
            data["arrival"]["rate"] = float(rate)
        if self.plan.num_requests is not None:
            data["num_requests"] = self.plan.num_requests
            data.pop("duration_s", None)
        path = probe_dir / "workload.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def _run_spec(self, value: float, workload: Path, seed: int) -> RunSpec:
        plan = self.plan
        engine = plan.engine
        replicas = plan.num_replicas
        if self.param == "num_replicas":
            replicas = int(value)
        elif self.param == "num_gpu_blocks":
            engine = engine.model_copy(update={"num_gpu_blocks_override": int(value)})
        elif self.param == "gpu_memory_utilization":
            engine = engine.model_copy(update={"gpu_memory_utilization": float(value)})
        elif self.param == "max_num_seqs":
            engine = engine.model_copy(update={"max_num_seqs": int(value)})
        return RunSpec(
            workload=str(workload),
            model=plan.model,
            gpu=plan.gpu,
            engine=engine,
            seed=seed,
            num_replicas=replicas,
            router=plan.router,
        )

    def probe(self, value: float) -> bool:
        """Run every seed at ``value``; record the probe; True when it passes."""
        probe_dir = self.out / "probes" / f"{self.param}={fmt_value(value)}"
        probe_dir.mkdir(parents=True, exist_ok=True)
        rate = value if self.param == "rate" else self.plan.rate
        workload = self._workload_file(rate, probe_dir)
        seeds = [self._run_seed(value, workload, probe_dir, s) for s in self.plan.seeds]
        passed = all(s["passed"] for s in seeds)
        self.probes.append(
            {"value": value, "passed": passed, "dir": str(probe_dir), "seeds": seeds}
        )
        return passed

    def _run_seed(self, value: float, workload: Path, probe_dir: Path, seed: int) -> dict:
        run_dir = probe_dir / f"seed_{seed}"
        entry: dict[str, Any] = {"seed": seed, "run_dir": str(run_dir)}
        try:
            summary = run(self._run_spec(value, workload, seed), run_dir, render=False)
        except (SimulationStuck, NothingServed, ValueError) as e:
            # The configuration cannot serve the workload (e.g. too few KV blocks).
            return {
                **entry,
                "passed": False,
                "state": "failed",
                "failures": [str(e)],
                "metrics": None,
            }
        return {**entry, **judge_summary(summary, self.plan.slo.bounds())}


def judge_summary(summary: dict[str, Any], bounds: dict[str, float]) -> dict[str, Any]:
    """``{passed, state, reasons, failures, metrics}`` of one run against the SLOs."""
    verdict = summary["verdict"]
    values = {
        "ttft_p90_s": summary["ttft_s"]["p90"],
        "tpot_p99_s": summary["tpot_s"]["p99"],
        "e2e_p99_s": summary["e2e_s"]["p99"],
        "max_preemptions_per_request": summary["preemptions_per_request"],
    }
    failures = [
        f"{k} {values[k]:.4g} > {bound:.4g}"
        for k, bound in bounds.items()
        if not math.isfinite(values[k]) or values[k] > bound
    ]
    saturated = verdict["state"] != "steady"
    if saturated:
        failures = ["saturated: " + "; ".join(verdict["reasons"])]
    return {
        "passed": not failures,
        "state": verdict["state"],
        "reasons": verdict["reasons"],
        "failures": failures,
        "metrics": None if saturated else values,
        "throughput_rps": summary["throughput_rps"],
    }
