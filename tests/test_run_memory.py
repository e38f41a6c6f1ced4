"""What a run holds on to while its report is rendered: nothing of the simulation.

The engines, schedulers and recorders of a run refer to one another, so they outlive
``simulate`` until a full garbage collection; their per-step and per-request columns
(~0.5 kB per request) must be gone before the report reads the run's files back (a
1,000,000-request run's peak memory is otherwise the two together).
"""

from __future__ import annotations

import gc
from pathlib import Path

import reports.run_report
from sim.app.run import RunSpec, run
from sim.records.recorders import StepRecorder
from sim.records.request_recorder import RequestRecorder
from workloads.overrides import WorkloadOverrides


def test_the_simulation_is_freed_before_the_report(tmp_path: Path, monkeypatch) -> None:
    alive: list[int] = []

    def render_run(run_dir: Path) -> None:
        # type(), not isinstance: isinstance reads __class__, which some modules'
        # deprecated attributes answer with a warning.
        recorders = (StepRecorder, RequestRecorder)
        alive.append(sum(type(o) in recorders for o in gc.get_objects()))

    monkeypatch.setattr(reports.run_report, "render_run", render_run)
    spec = RunSpec(workload="chat", workload_overrides=WorkloadOverrides(num_requests=40))
    summary = run(spec, tmp_path / "run", helpers=False)
    assert summary["num_finished"] == 40
    assert alive == [0]
