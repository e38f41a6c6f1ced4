"""One simulation run: resolve the configuration, simulate, write the run directory.

The directory is written under a temporary name and renamed into place at the end,
so an interrupted or failed run never leaves a directory that looks complete.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import simpy
import yaml

from kvcore import NATIVE_STATUS, VLLM_VERSION, __version__
from reports.render_worker import RenderWorker
from sim import offload
from sim.app.engine_config import EngineConfig, engine_loop, uses_async_scheduling
from sim.app.kv_offload import FAST_FORWARD_NOT_APPLICABLE, offload_summary
from sim.app.outdir import OutputTarget, check_output, discard, publish, staging_dir
from sim.app.pd_config import PDSpec
from sim.app.setup import ResolvedRun, resolve_run
from sim.defaults import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_WORKLOAD  # noqa: F401 (re-exported)
from sim.engine.cluster import Cluster
from sim.engine.input_limits import nothing_served_message
from sim.engine.pd_cluster import PDCluster
from sim.engine.router import Router, make_router
from sim.records.pd import append_pd_columns, pd_summary
from sim.records.recorders import RequestRecorder, StepRecorder
from sim.records.summary import build_summary
from sim.records.verdict import VerdictInputs, judge_inputs, replica_summaries_from_recorders
from sim.signals import raise_pending
from sim.spec_decode.setup import FAST_FORWARD_OFF, spec_summary, write_timeline
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


def _checking_signals(on_progress: Callable[[int], None] | None) -> Callable[[int], None]:
    """``on_progress`` (called per finished request) that first re-raises a SIGTERM,
    SIGHUP or SIGINT whose exception was swallowed (:func:`sim.signals.raise_pending`)."""
    if on_progress is None:
        return lambda n: raise_pending()

    def checked(n: int) -> None:
        raise_pending()
        on_progress(n)

    return checked


@contextmanager
def _rare_collections() -> Iterator[None]:
    """Cyclic garbage collection seldom, and never over what existed before (a run
    makes almost no reference cycles; scanning the KV block pool and the modules again
    and again cost ~4% of a light-load run). Restored on exit; when the caller froze
    objects itself, they stay frozen and nothing else is."""
    old = gc.get_threshold()
    freeze = gc.get_freeze_count() == 0  # a caller's own frozen objects stay frozen
    if freeze:
        gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        if freeze:
            gc.unfreeze()


def simulate(
    resolved: ResolvedRun,
    out_dir: Path,
    *,
    decisions: bool = False,
    check: bool = False,
    fast_forward: bool = True,
    on_progress: Callable[[int], None] | None = None,
    num_replicas: int = 1,
    router: str | Router = "round_robin",
    helpers: bool | None = None,
    goodput: dict[str, float] | None = None,
    steps_mode: str = "full",
    steps_format: str = "csv",
    on_cluster: Callable[[Cluster | PDCluster], None] | None = None,
) -> dict[str, Any]:
    """Run the simulation, writing ``steps.csv``, ``requests.csv`` (and
    ``decisions.jsonl``) into ``out_dir``; return the summary (with the run's
    verdict, one entry per replica and ``steps_file``: what ``steps.csv`` holds).

    ``router``: a router name (:func:`sim.engine.router.make_router`) or a router.
    ``helpers``: format ``steps.csv`` and draw an open-loop workload in helper
    processes (:mod:`sim.offload`; same bytes either way); None: when
    ``sim.offload.allowed()``. ``steps_mode``: ``full``, ``thin`` or ``none``
    (:mod:`sim.records.step_thin`); ``steps_format``: ``csv`` or ``parquet``
    (``steps.parquet``, :mod:`sim.records.step_parquet`). ``on_cluster``: called with the cluster
    (its ``engines``) once it is built, before anything runs: how a caller observes the
    engines of a run.
    """
    wall0 = time.perf_counter()
    if helpers is None:
        helpers = offload.allowed()
    on_progress = _checking_signals(on_progress)
    env = simpy.Environment()
    with ExitStack() as stack:  # closes whatever was opened, also on errors
        name = "steps.parquet" if steps_format == "parquet" else "steps.csv"
        steps = StepRecorder(
            out_dir / name,
            helper=helpers,
            mode=steps_mode,
            fmt=steps_format,
            num_replicas=num_replicas,
        )
        stack.callback(steps.close)
        requests = RequestRecorder(out_dir / "requests.csv")
        stack.callback(requests.close)
        decisions_file = (
            stack.enter_context((out_dir / "decisions.jsonl").open("w")) if decisions else None
        )
        cluster: Cluster | PDCluster
        if resolved.pd is not None:  # prefill and decode pools (sim.engine.pd_cluster)
            cluster = PDCluster(
                env,
                resolved,
                router if isinstance(router, str) else router.name,
                steps,
                requests,
                check=check,
                decisions=decisions_file,
                on_progress=on_progress,
            )
            num_replicas = resolved.pd.num_instances
        else:
            cluster = Cluster(
                env,
                resolved,
                num_replicas,
                make_router(router) if isinstance(router, str) else router,
                steps,
                requests,
                check=check,
                decisions=decisions_file,
                on_progress=on_progress,
                fast_forward=fast_forward,
            )
        if on_cluster is not None:
            on_cluster(cluster)
        drawn = resolved.workload.draw_ahead(cluster.prompt_hashes) if helpers else None
        ahead = None
        if drawn is not None:
            ahead = offload.ChunkReader(lambda: drawn, "workload")
            stack.callback(ahead.close)
        resolved.workload.start(env, cluster.submit, ahead)
        stack.enter_context(_rare_collections())
        stack.callback(resolved.workload.release)  # it holds the engines: not beyond the run
        if isinstance(cluster, PDCluster):
            cluster.run()
        else:
            env.run(until=cluster.process)
    if isinstance(cluster, PDCluster):
        append_pd_columns(out_dir / "requests.csv", cluster.rows)
    summary = build_summary(
        steps,
        requests,
        num_requests=requests.num_finished + cluster.num_rejected + requests.num_aborted,
        num_rejected=cluster.num_rejected,
        sim_duration_s=env.now,
        wall_s=time.perf_counter() - wall0,
        num_gpu_blocks=resolved.num_gpu_blocks,
        block_size=resolved.engine.block_size,
        input_limits=cluster.limits.summary(resolved.workload),
        goodput=goodput,
        frontend=resolved.frontend,
        timeouts=getattr(resolved.workload, "has_timeouts", False),
    )
    summary["verdict"] = judge_inputs(VerdictInputs.from_recorders(steps, requests))
    summary["num_replicas"] = num_replicas
    summary["router"] = router if isinstance(router, str) else router.name
    summary["replicas"] = [
        {**r, "num_routed": cluster.num_routed[r["replica"]]}
        for r in replica_summaries_from_recorders(steps, requests, num_replicas)
    ]
    if resolved.offload is not None:
        summary["offload"] = _offload_block(resolved, cluster, steps)
    if isinstance(cluster, PDCluster):
        summary["pd"] = pd_summary(cluster, env.now)
    if resolved.spec is not None:
        runs = [e.spec for e in cluster.engines if e.spec is not None]
        write_timeline(out_dir / "spec_decode.csv", runs)
        summary["spec_decode"] = spec_summary(
            resolved.spec, runs, requests.output_tokens, steps.num_steps
        )
    summary["steps_file"] = steps.file_info()
    summary["wall_s"] = time.perf_counter() - wall0
    return summary


def _offload_block(resolved: ResolvedRun, cluster: Cluster, steps: StepRecorder) -> dict[str, Any]:
    """``summary.json``'s ``offload`` block (:func:`sim.app.kv_offload.offload_summary`)."""
    assert resolved.offload is not None
    queries = hits = 0
    stats = []
    for e in cluster.engines:
        cs = e.scheduler.connector_prefix_cache_stats
        if cs is not None:
            queries += cs.queries + cs.preempted_queries
            hits += cs.hits + cs.preempted_hits
        if e.offload is not None:
            stats.append(e.offload.stats)
    return offload_summary(
        resolved.offload, stats, queries, hits, steps.prefix_queries, steps.prefix_hits
    )


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
            worker = RenderWorker()
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
        if render:
            # The run's engines, scheduler and recorders refer to one another (cycles
            # only a full collection frees): ~0.5 kB per request, free before the
            # report reads the files back.
            gc.collect()
        (tmp / "config.yaml").write_text(
            yaml.safe_dump(resolved_config(spec, resolved), sort_keys=False)
        )
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        if worker is not None:
            worker.render(tmp)
        elif render:
            from reports.run_report import render_run

            render_run(tmp)
        publish(tmp, target)
    except BaseException:
        discard(tmp)
        raise
    finally:
        if worker is not None:
            worker.close()
    return summary
