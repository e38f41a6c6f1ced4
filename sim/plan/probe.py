"""One planning probe: the same configuration run once per seed, judged against SLOs.

A probe's value sets the searched parameter (request rate, replica count or a KV
knob). Each seed's run directory is kept under ``OUT/probes/<param>=<value>/seed_<s>``
beside the workload YAMLs the probe ran (the plan's workload with ``arrival.rate`` and
its length set). A seed's run is lengthened until it decides (:mod:`sim.plan.length`);
the directory holds its last run. A seed passes when its run is steady (see
``sim.records.verdict``) and meets every SLO (:mod:`sim.plan.judge`: the run's
measurement-window figures); a probe passes when every seed passes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from sim.app.run import NothingServed, RunSpec, run
from sim.errors import SimulationStuck
from sim.plan.judge import judge_summary
from sim.plan.length import confirm_factor, needs_longer
from sim.plan.spec import PlanError, PlanSpec
from sim.records.verdict import UNDECIDED
from workloads.errors import WorkloadError
from workloads.loader import YAML_SUFFIXES, load_spec, preset_path
from workloads.overrides import RATED_ARRIVALS, WorkloadOverrides, override_spec
from workloads.spec import WorkloadSpec
from workloads.spec_lengths import absolute_empirical_paths

PARAM = {"max_rate": "rate", "min_replicas": "num_replicas"}
OnRun = Callable[[int, str, "int | None"], "Callable[[int], None] | None"]
"""What the plan's progress bar is told before each run: the probe's number (1 for the
first), a label, the run's requests (None for a run bounded by a duration)."""


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
    kind = spec.arrival.type if spec.arrival is not None else "stages"
    if needs_rate and kind not in RATED_ARRIVALS:
        raise PlanError(
            f"{source}: workload: {text} has arrival type {kind!r}; planning "
            f"sets arrival.rate, so it needs one of {', '.join(RATED_ARRIVALS)}"
        )
    return spec


def fmt_value(value: float) -> str:
    """A probe value as text for directory names and tables (4 significant digits)."""
    return f"{value:.4g}" if not float(value).is_integer() else str(int(value))


class ProbeRunner:
    """Runs probes for one plan under ``out``; remembers every probe it ran."""

    def __init__(
        self, plan: PlanSpec, base: WorkloadSpec, out: Path, on_run: OnRun | None = None
    ) -> None:
        """``on_run`` (:data:`OnRun`) is called before each run and returns the run's
        progress callback (requests finished), or None: the plan's progress bar."""
        self.plan = plan
        self.base = base
        self.out = Path(out)
        self.param = param_name(plan)
        self.probes: list[dict[str, Any]] = []
        self.on_run = on_run

    def start_length(self) -> tuple[str, float]:
        """``(key, value)`` of a probe run's starting length: the plan's
        ``num_requests``, else the workload's ``num_requests`` or ``duration_s``."""
        if self.plan.num_requests is not None:
            return "num_requests", float(self.plan.num_requests)
        if self.base.num_requests is not None:
            return "num_requests", float(self.base.num_requests)
        return "duration_s", float(self.base.duration_s)

    def _workload_file(self, rate: float | None, probe_dir: Path, factor: int = 1) -> Path:
        """The probe's workload at ``factor`` times the starting length
        (``workload.yaml``; ``workload-x<factor>.yaml`` when lengthened)."""
        key, start = self.start_length()
        length = {key: int(start) * factor if key == "num_requests" else start * factor}
        overrides = WorkloadOverrides(rate=None if rate is None else float(rate), **length)
        try:
            spec = override_spec(self.base, overrides, self.plan.workload)
        except WorkloadError as e:
            raise PlanError(str(e)) from None
        data = spec.model_dump(mode="json", exclude_none=True)
        source = preset_path(self.plan.workload) or Path(self.plan.workload)
        absolute_empirical_paths(data, source.parent)  # the copy lives in probe_dir
        data["name"] = self.base.name or Path(self.plan.workload).stem
        name = "workload.yaml" if factor == 1 else f"workload-x{factor}.yaml"
        path = probe_dir / name
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
            pd=plan.pd,
            steps=plan.steps,
            steps_format=plan.steps_format,
        )

    def probe(self, value: float) -> bool:
        """Run every seed at ``value``; record the probe; True when it passes."""
        return self.probe_named(value, f"{self.param}={fmt_value(value)}", {})

    def probe_named(self, value: float, name: str, extra: dict[str, Any]) -> bool:
        """Run every seed at ``value`` in ``probes/<name>``; record the probe (with the
        ``extra`` keys); True when it passes."""
        probe_dir = self.out / "probes" / name
        probe_dir.mkdir(parents=True, exist_ok=True)
        rate = value if self.param == "rate" else self.plan.rate
        seeds = [self._run_seed(value, rate, probe_dir, s) for s in self.plan.seeds]
        passed = all(s["passed"] for s in seeds)
        self.probes.append(
            {
                "value": value,
                **extra,
                "passed": passed,
                "confirmed": False,
                "dir": str(probe_dir),
                "seeds": seeds,
            }
        )
        return passed

    def confirm(self, value: float) -> bool:
        """Confirm the search's answer ``value`` (a passing probe): run each seed again
        until its window spans ``length.confirm_sojourns`` mean sojourn times
        (:func:`sim.plan.length.confirm_factor`), stopping at the first seed that fails.
        The probe's entry is updated (``confirmed``, each seed's longest run); True
        when it still passes."""
        return self.confirm_probe(next(p for p in self.probes if p["value"] == value))

    def confirm_probe(self, probe: dict[str, Any]) -> bool:
        """:meth:`confirm` of one recorded probe (an entry of :attr:`probes`)."""
        value = probe["value"]
        length = self.plan.length
        if not probe["passed"] or length.fixed or length.confirm_sojourns <= 0:
            return bool(probe["passed"])
        probe_dir = Path(probe["dir"])
        rate = value if self.param == "rate" else self.plan.rate
        seeds = []
        for entry in probe["seeds"]:
            factors = entry["length"]["factors"]
            need = confirm_factor(
                entry.get("sojourns"), factors[-1], length.confirm_sojourns, length.max_factor
            )
            if probe["passed"] and need > factors[-1]:
                longer = self._run_seed(value, rate, probe_dir, entry["seed"], need)
                longer["length"]["factors"] = factors + longer["length"]["factors"]
                entry = longer
                probe["passed"] = bool(entry["passed"])
            seeds.append(entry)
        probe["seeds"] = seeds
        probe["confirmed"] = True
        return bool(probe["passed"])

    def _run_seed(
        self, value: float, rate: float | None, probe_dir: Path, seed: int, factor: int = 1
    ) -> dict:
        """One seed from ``factor`` times the start length, lengthened as
        :mod:`sim.plan.length` says; the entry of its last run, with ``length`` (each
        run's factor of the start length) and ``length_note``."""
        bounds = self.plan.slo.bounds()
        length = self.plan.length
        factors = []
        while True:
            workload = self._workload_file(rate, probe_dir, factor)
            last = length.fixed or factor * 2 > length.max_factor
            progress = None
            if self.on_run is not None:
                key, start = self.start_length()
                times = f" x{factor}" if factor > 1 else ""
                progress = self.on_run(
                    len(self.probes) + 1,
                    f"probe {len(self.probes) + 1} {probe_dir.name} seed {seed}{times}",
                    int(start) * factor if key == "num_requests" else None,
                )
            margin = length.precision if last else None
            entry = self._run_once(value, workload, probe_dir, seed, bounds, margin, progress)
            factors.append(factor)
            why = needs_longer(entry, bounds, length.precision)
            if not why or last:
                break
            factor *= 2
        key, start = self.start_length()
        entry["length"] = {"key": key, "start": start, "factors": factors}
        entry["length_note"] = None
        if why:
            limit = "the fixed length" if length.fixed else f"max_factor {length.max_factor}"
            judged = (
                f"judged as drifting: each SLO must clear its bound by {length.precision:.0%}"
                if entry.get("state") == UNDECIDED
                else "judged on the point values"
            )
            entry["length_note"] = f"undecided at {limit} ({', '.join(why)}): {judged}"
        return entry

    def _run_once(
        self,
        value: float,
        workload: Path,
        probe_dir: Path,
        seed: int,
        bounds: dict[str, float],
        drift_margin: float | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> dict:
        run_dir = probe_dir / f"seed_{seed}"
        entry: dict[str, Any] = {"seed": seed, "run_dir": str(run_dir)}
        try:
            spec = self._run_spec(value, workload, seed)
            summary = run(spec, run_dir, render=False, on_progress=on_progress)
        except (SimulationStuck, NothingServed, ValueError) as e:
            # The configuration cannot serve the workload (e.g. too few KV blocks).
            return {
                **entry,
                "passed": False,
                "state": "failed",
                "failures": [str(e)],
                "metrics": None,
                "intervals": None,
            }
        return {**entry, **judge_summary(summary, bounds, drift_margin)}
