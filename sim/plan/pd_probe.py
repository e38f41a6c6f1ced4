"""Probes of a P/D plan: one prefill:decode split, every seed, judged as any probe.

A split's probe runs the plan's ``pd`` (its link, and each pool's GPU and engine
arguments when ``pd`` is a file) with the split's instance counts, in
``OUT/probes/prefill=P,decode=D/seed_<s>``; its ``value`` is the total instance count
``P + D`` and its ``split`` the two counts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from sim.app.pd_config import PDSpec, parse_pd
from sim.app.run import RunSpec
from sim.plan.pd_search import OutOfProbes, Split
from sim.plan.probe import OnRun, ProbeRunner
from sim.plan.spec import PlanSpec
from workloads.spec import WorkloadSpec


def split_name(split: Split) -> str:
    """``prefill=P,decode=D``: a split as ``--pd`` writes it (and its probe's folder)."""
    return f"prefill={split[0]},decode={split[1]}"


class PDProbeRunner(ProbeRunner):
    """Runs split probes for one P/D plan, each split at most once (a memo), within
    ``max_probes`` (then :class:`sim.plan.pd_search.OutOfProbes`)."""

    def __init__(
        self,
        plan: PlanSpec,
        base: WorkloadSpec,
        out: Path,
        max_probes: int,
        on_run: OnRun | None = None,
    ) -> None:
        super().__init__(plan, base, out, on_run)
        assert plan.pd is not None
        self.pd: PDSpec = parse_pd(plan.pd)
        self.max_probes = max_probes
        self.verdicts: dict[Split, bool] = {}
        """Each split probed: passed (False once its confirmation failed)."""
        self._split: Split = (self.pd.num_prefill, self.pd.num_decode)

    @property
    def limits(self) -> Split:
        """The most prefill and decode instances searched: ``pd``'s counts."""
        return self.pd.num_prefill, self.pd.num_decode

    def passes(self, prefill: int, decode: int) -> bool:
        """Whether the split meets the SLOs: probed once, then remembered."""
        split = (prefill, decode)
        if split not in self.verdicts:
            if len(self.verdicts) >= self.max_probes:
                raise OutOfProbes(split)
            self._split = split
            extra = {"split": {"prefill": prefill, "decode": decode}}
            self.verdicts[split] = self.probe_named(
                float(prefill + decode), split_name(split), extra
            )
        return self.verdicts[split]

    def confirm_split(self, split: Split) -> bool:
        """Confirm a passing split over a long window (:meth:`ProbeRunner.confirm_probe`);
        a split that fails it is remembered as failing."""
        self._split = split
        probe = next(p for p in self.probes if self._split_of(p) == split)
        ok = self.confirm_probe(probe)
        self.verdicts[split] = ok
        return ok

    def seed_verdicts(self) -> dict[Split, list[bool]]:
        """Each probed split's verdict per seed (in the plan's seed order)."""
        return {self._split_of(p): [bool(s["passed"]) for s in p["seeds"]] for p in self.probes}

    @staticmethod
    def _split_of(probe: dict[str, Any]) -> Split:
        return int(probe["split"]["prefill"]), int(probe["split"]["decode"])

    def _run_spec(self, value: float, workload: Path, seed: int) -> RunSpec:
        spec = super()._run_spec(value, workload, seed)
        pd = dataclasses.replace(self.pd, num_prefill=self._split[0], num_decode=self._split[1])
        return dataclasses.replace(spec, num_replicas=1, pd=pd)
