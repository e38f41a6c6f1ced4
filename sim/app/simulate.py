"""The simulation of one run: build the cluster and its recorders from a resolved run,
drive the workload through it, and summarize what it recorded (:func:`simulate`).

The run directory around it (staging, ``config.yaml``, the report, the final rename) is
:mod:`sim.app.run`'s.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import simpy

from sim import offload
from sim.app.kv_offload import offload_summary
from sim.app.setup import ResolvedRun
from sim.engine.cluster import Cluster
from sim.engine.pd_cluster import PDCluster
from sim.engine.router import Router, make_router
from sim.records.pd import append_pd_columns, pd_summary
from sim.records.recorders import StepRecorder
from sim.records.request_recorder import RequestRecorder
from sim.records.summary import build_summary
from sim.records.verdict import VerdictInputs, judge_inputs, replica_summaries_from_recorders
from sim.signals import raise_pending
from sim.spec_decode.setup import spec_summary, write_timeline


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
def _rare_collections() -> Iterator[Callable[[], None]]:
    """Cyclic garbage collection seldom, and never over what existed before (a run
    makes almost no reference cycles; scanning the KV block pool and the modules again
    and again cost ~4% of a light-load run). Yields a function that exempts what was
    built since (the cluster: call it once built; a full collection while a 29,000-block
    pool was built took 27 ms). Collection is on inside, also when the caller had turned
    it off (``kvsim run`` does while it starts). Restored on exit; when the caller froze
    objects itself, they stay frozen and nothing else is."""
    old = gc.get_threshold()
    enabled = gc.isenabled()
    freeze = gc.get_freeze_count() == 0  # a caller's own frozen objects stay frozen
    if freeze:
        gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    gc.enable()
    try:
        yield gc.freeze if freeze else _nothing
    finally:
        gc.set_threshold(*old)
        if not enabled:
            gc.disable()
        if freeze:
            gc.unfreeze()


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class _Records:
    """The recorders a run writes into its directory: ``steps.csv`` (or
    ``steps.parquet``), ``requests.csv`` and, when asked, ``decisions.jsonl``."""

    steps: StepRecorder
    requests: RequestRecorder
    decisions: IO[str] | None


def _open_records(
    stack: ExitStack,
    out_dir: Path,
    *,
    decisions: bool,
    helpers: bool,
    steps_mode: str,
    steps_format: str,
    num_replicas: int,
) -> _Records:
    """Open the run's recorders in ``out_dir``, each closed by ``stack``."""
    name = "steps.parquet" if steps_format == "parquet" else "steps.csv"
    steps = StepRecorder(
        out_dir / name, helper=helpers, mode=steps_mode, fmt=steps_format, num_replicas=num_replicas
    )
    stack.callback(steps.close)
    requests = RequestRecorder(out_dir / "requests.csv", helper=helpers)
    stack.callback(requests.close)
    decisions_file = (
        stack.enter_context((out_dir / "decisions.jsonl").open("w")) if decisions else None
    )
    return _Records(steps, requests, decisions_file)


def _build_cluster(
    env: simpy.Environment,
    resolved: ResolvedRun,
    records: _Records,
    *,
    num_replicas: int,
    router: str | Router,
    check: bool,
    fast_forward: bool,
    on_progress: Callable[[int], None],
) -> Cluster | PDCluster:
    """The run's engines: prefill and decode pools (:mod:`sim.engine.pd_cluster`) for a
    P/D run, else ``num_replicas`` replicas behind ``router``."""
    if resolved.pd is not None:
        return PDCluster(
            env,
            resolved,
            router if isinstance(router, str) else router.name,
            records.steps,
            records.requests,
            check=check,
            decisions=records.decisions,
            on_progress=on_progress,
        )
    return Cluster(
        env,
        resolved,
        num_replicas,
        make_router(router) if isinstance(router, str) else router,
        records.steps,
        records.requests,
        check=check,
        decisions=records.decisions,
        on_progress=on_progress,
        fast_forward=fast_forward,
    )


def _start_workload(
    stack: ExitStack,
    env: simpy.Environment,
    resolved: ResolvedRun,
    cluster: Cluster | PDCluster,
    helpers: bool,
) -> None:
    """Start the workload's arrivals into ``cluster`` (drawn ahead in a helper process
    when ``helpers``); the workload lets go of the engines when ``stack`` closes."""
    drawn = resolved.workload.draw_ahead(cluster.prepare_prompt) if helpers else None
    ahead = None
    if drawn is not None:
        ahead = offload.ChunkReader(lambda: drawn, "workload")
        stack.callback(ahead.close)
    if isinstance(cluster, Cluster):
        cluster.open_feed(resolved.workload)
    resolved.workload.start(env, cluster.submit, ahead)
    stack.callback(resolved.workload.release)  # it holds the engines: not beyond the run


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
        exempt_built = stack.enter_context(_rare_collections())
        records = _open_records(
            stack, out_dir, decisions=decisions, helpers=helpers, steps_mode=steps_mode,
            steps_format=steps_format, num_replicas=num_replicas,
        )  # fmt: skip
        cluster = _build_cluster(
            env, resolved, records, num_replicas=num_replicas, router=router, check=check,
            fast_forward=fast_forward, on_progress=on_progress,
        )  # fmt: skip
        if resolved.pd is not None:
            num_replicas = resolved.pd.num_instances
        if on_cluster is not None:
            on_cluster(cluster)
        _start_workload(stack, env, resolved, cluster, helpers)
        exempt_built()
        if isinstance(cluster, PDCluster):
            cluster.run()
        else:
            env.run(until=cluster.process)
        # The writers' helpers write their last rows while the summary is computed
        # (from what the recorders keep); leaving the block waits for them.
        records.steps.finish()
        records.requests.finish()
        router_name = router if isinstance(router, str) else router.name
        summary = _summary(
            resolved, env, cluster, records, wall0, goodput, num_replicas, router_name
        )
    if isinstance(cluster, PDCluster):
        append_pd_columns(out_dir / "requests.csv", cluster.rows)
    _feature_blocks(summary, resolved, env, cluster, records, out_dir)
    summary["steps_file"] = records.steps.file_info()
    summary["wall_s"] = time.perf_counter() - wall0
    return summary


def _summary(
    resolved: ResolvedRun,
    env: simpy.Environment,
    cluster: Cluster | PDCluster,
    records: _Records,
    wall0: float,
    goodput: dict[str, float] | None,
    num_replicas: int,
    router: str,
) -> dict[str, Any]:
    """``summary.json``'s figures of every run (:func:`sim.records.summary.build_summary`),
    its verdict, and the cluster's replicas (``wall0``: ``time.perf_counter()`` at the
    start, seconds)."""
    steps, requests = records.steps, records.requests
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
    summary["router"] = router
    summary["replicas"] = [
        {**r, "num_routed": cluster.num_routed[r["replica"]]}
        for r in replica_summaries_from_recorders(steps, requests, num_replicas)
    ]
    return summary


def _feature_blocks(
    summary: dict[str, Any],
    resolved: ResolvedRun,
    env: simpy.Environment,
    cluster: Cluster | PDCluster,
    records: _Records,
    out_dir: Path,
) -> None:
    """Add the blocks of the run's features to ``summary``: the CPU offload tier's, the
    P/D pools' and speculative decoding's (whose timeline goes to ``spec_decode.csv``)."""
    steps = records.steps
    if resolved.offload is not None:
        summary["offload"] = _offload_block(resolved, cluster, steps)
    if isinstance(cluster, PDCluster):
        summary["pd"] = pd_summary(cluster, env.now)
    if resolved.spec is not None:
        runs = [e.spec for e in cluster.engines if e.spec is not None]
        write_timeline(out_dir / "spec_decode.csv", runs)
        summary["spec_decode"] = spec_summary(
            resolved.spec, runs, records.requests.output_tokens, steps.num_steps
        )


def _offload_block(
    resolved: ResolvedRun, cluster: Cluster | PDCluster, steps: StepRecorder
) -> dict[str, Any]:
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
