"""One simulation run: resolve the configuration, simulate, write the run directory.

The directory is written under a temporary name and renamed into place at the end,
so an interrupted or failed run never leaves a directory that looks complete. The
simulation itself (cluster, recorders, summary) is :mod:`sim.app.simulate`'s.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kvcore import NATIVE_STATUS, VLLM_VERSION, __version__
from reports.render_worker import RenderWorker
from sim import offload
from sim.app.engine_config import EngineConfig, engine_loop, uses_async_scheduling
from sim.app.kv_offload import FAST_FORWARD_NOT_APPLICABLE
from sim.app.outdir import OutputTarget, check_output, discard, publish, staging_dir
from sim.app.pd_config import PDSpec
from sim.app.setup import ResolvedRun, resolve_run
from sim.app.simulate import simulate
from sim.defaults import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_WORKLOAD  # noqa: F401 (re-exported)
from sim.engine.input_limits import nothing_served_message
from sim.engine.router import Router
from sim.spec_decode.setup import FAST_FORWARD_OFF
from workloads.overrides import WorkloadOverrides


class NothingServed(ValueError):
    """Every request was rejected (its prompt does not fit max_model_len)."""


@dataclass
class RunSpec:
    """What the user asked for; ``resolve_run`` turns it into a runnable setup."""

    workload: str = DEFAULT_WORKLOAD
    model: str = DEFAULT_MODEL
    gpu: str = DEFAULT_GPU
    engine: EngineConfig = field(default_factory=EngineConfig)
    seed: int | None = None
    calibration: str | None = None
    decisions: bool = False
    check: bool = False
    num_replicas: int = 1
    router: str = "round_robin"
    fast_forward: bool = True
    """Advance decode-only stretches at once (identical results; off only to prove it)."""
    goodput: dict[str, float] | None = None
    """Per-request SLOs for goodput, ms by vLLM's keys (``ttft``, ``tpot``, ``e2el``;
    :mod:`sim.records.goodput`); None: no goodput."""
    workload_overrides: WorkloadOverrides | None = None
    """The workload's rate and length as ``kvsim run --rate/--num-requests/--duration``
    set them (:mod:`workloads.overrides`); None keeps the workload's own."""
    steps: str = "full"
    """``steps.csv``: ``full`` (a row per step), ``thin`` (bounded rows) or ``none``
    (:mod:`sim.records.step_thin`)."""
    steps_format: str = "csv"
    """``csv`` (``steps.csv``, the default) or ``parquet`` (``steps.parquet``, needs
    pyarrow; :mod:`sim.records.step_parquet`)."""
    pd: PDSpec | str | None = None
    """Prefill/decode disaggregation (``--pd``, :mod:`sim.app.pd_config`; its text, as a
    sweep's ``pd`` axis gives it, is parsed when the run is resolved); None: colocated."""


def _connector_name(resolved: ResolvedRun) -> str | None:
    """The vLLM KV connector the run's replicas have, if any."""
    if resolved.offload is not None:
        return "OffloadingConnector"
    return "NixlConnector" if resolved.pd is not None else None


def resolved_config(spec: RunSpec, resolved: ResolvedRun) -> dict[str, Any]:
    """The fully resolved configuration written to ``config.yaml``."""
    return {
        "kvsim_version": __version__,
        "mirrors_vllm_version": VLLM_VERSION,
        "native_build": NATIVE_STATUS,  # which build of the hot modules ran (same results)
        "seed": resolved.workload_config.get("seed", resolved.seed),
        "workload": resolved.workload_config,
        "model": resolved.model_name,
        "gpu": resolved.gpu_name,
        "calibration": spec.calibration,
        "engine": {
            **spec.engine.model_dump(),
            "max_model_len": resolved.max_model_len,
            "max_num_batched_tokens": resolved.max_num_batched_tokens,
            "max_num_seqs": resolved.max_num_seqs,
            "async_scheduling": uses_async_scheduling(resolved.engine),
        },
        "engine_loop": engine_loop(resolved.engine, _connector_name(resolved)),
        # Only a run with the CPU KV tier names these (other config.yaml files unchanged).
        **(
            {"kv_offload": resolved.offload.describe(), "fast_forward": FAST_FORWARD_NOT_APPLICABLE}
            if resolved.offload is not None
            else {}
        ),
        # Only a MoE model's DP run names this.
        **(
            {
                "dp_lockstep": (
                    f"{spec.num_replicas // resolved.engine.data_parallel_size} DP groups of "
                    f"{resolved.engine.data_parallel_size} ranks (a MoE model's, vLLM's "
                    "DPEngineCoreProc): each forward starts on every rank together and "
                    "lasts its slowest rank's step"
                ),
                "fast_forward": "off: DP ranks in lockstep (every step is stepped)",
            }
            if resolved.dp_lockstep
            else {}
        ),
        # Only a run with speculative decoding names these.
        **(
            {"speculative_decoding": resolved.spec.describe(), "fast_forward": FAST_FORWARD_OFF}
            if resolved.spec is not None
            else {}
        ),
        "steps": spec.steps,
        "steps_format": spec.steps_format,
        "kv_budget": resolved.budget_terms,
        "latency_model": resolved.latency_description,
        "frontend": resolved.frontend.describe(),
        **({"goodput_slo_ms": dict(spec.goodput)} if spec.goodput else {}),
        # Only a P/D run names this.
        **({"pd": resolved.pd.describe(spec.router)} if resolved.pd is not None else {}),
        # Only clusters name these, so a one-replica config.yaml is as it always was.
        **(
            {"num_replicas": spec.num_replicas, "router": spec.router}
            if spec.num_replicas > 1
            else {}
        ),
    }


def run(
    spec: RunSpec,
    out: Path,
    on_progress: Callable[[int], None] | None = None,
    resolved: ResolvedRun | None = None,
    render: bool = True,
    helpers: bool | None = None,
    force: bool = False,
    target: OutputTarget | None = None,
    router: Router | None = None,
) -> dict[str, Any]:
    """Resolve, simulate and write the whole run directory at ``out``; return the summary.

    ``router``: a router instance to use instead of one made from ``spec.router``.

    ``out`` is checked first (:func:`sim.app.outdir.check_output`; ``force`` as there, or
    a ``target`` the caller checked already): nothing kvsim did not write is deleted or
    overwritten, and a bad ``out`` raises :class:`sim.app.outdir.OutputError` before any
    simulation.

    ``render=False`` skips plots and ``report.html`` (planning probes; ``kvsim report``
    renders them later from the records). ``helpers``: see :func:`simulate`; also
    whether the report is rendered by a worker process started with the run
    (:mod:`reports.render_worker`: the same files).
    """
    resolved = resolved or resolve_run(spec)
    target = check_output(out, "run", force=force) if target is None else target
    tmp = staging_dir(target)
    worker: RenderWorker | None = None
    try:
        # Plots and report.html by a process that imports the renderer while the run
        # runs (reports.render_worker); with helpers off, in process. Started inside the
        # try: a signal while it starts must discard the staging directory too.
        if render and helpers is not False and offload.allowed():
            # A full steps.csv (one row per step, as it is written) is read meanwhile.
            full_csv = spec.steps == "full" and spec.steps_format == "csv"
            worker = RenderWorker(tmp / "steps.csv" if full_csv else None)
        summary = simulate(
            resolved,
            tmp,
            decisions=spec.decisions,
            check=spec.check,
            fast_forward=spec.fast_forward,
            on_progress=on_progress,
            num_replicas=spec.num_replicas,
            router=spec.router if router is None else router,
            helpers=helpers,
            goodput=spec.goodput,
            steps_mode=spec.steps,
            steps_format=spec.steps_format,
        )
        if summary["num_finished"] == 0 and summary["num_rejected"] > 0:
            raise NothingServed(nothing_served_message(spec.workload, summary))
        (tmp / "config.yaml").write_text(
            yaml.safe_dump(resolved_config(spec, resolved), sort_keys=False)
        )
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        # The run's engines, scheduler and recorders refer to one another (cycles only
        # a full collection frees): ~0.5 kB per request, freed before the report is
        # read back in this process. Not while a worker renders: its two drawing
        # processes then have both CPUs, which the collection (it walks the KV pool's
        # blocks, ~30 ms for 29,000 of them) took from them; the cycles go with the
        # process, or at the caller's next collection. 20,000-request trace, whole
        # processes paired against collecting then: wall 0.986 and 0.966 (20 pairs each).
        if worker is not None:
            worker.render(tmp)
        elif render:
            from reports.run_report import render_run

            gc.collect()
            render_run(tmp)
        publish(tmp, target)
    except BaseException:
        discard(tmp)
        raise
    finally:
        if worker is not None:
            worker.close()
    return summary
