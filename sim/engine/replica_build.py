"""How a cluster builds each replica's engine from one resolved run: its scheduler
(:func:`build_scheduler`, also P/D's), the block hasher all replicas share, the DP
groups' lockstep time lines, the regime each engine runs in and the engine class
(the async or synchronous loop, the CPU offload tier's). Units: seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

import simpy

from kvcore.async_scheduler import AsyncScheduler
from kvcore.block_hashing import FastBlockHasher
from kvcore.scheduler import Scheduler
from kvcore.scheduler_config import SchedulerConfig
from sim.app.engine_config import uses_async_scheduling
from sim.app.kv_offload import build_connector, make_host_link
from sim.engine.dp_lockstep import LockstepForwards
from sim.engine.offload import OffloadReplicaEngine
from sim.engine.offload_worker import OffloadWorker
from sim.engine.regime import decide_regime, stepping_part
from sim.engine.replica import ReplicaEngine
from sim.engine.replica_async import make_replica_engine
from sim.engine.replica_parts import ReplicaParts
from sim.records.recorders import StepRecorder
from sim.records.request_recorder import RequestRecorder


def build_scheduler(resolved: Any, connector: Any = None) -> Scheduler:
    """A fresh kvcore scheduler for one replica of a resolved run: an
    :class:`AsyncScheduler` with async scheduling (vLLM 0.33.0's default,
    :func:`sim.app.engine_config.uses_async_scheduling`), else a :class:`Scheduler`; with
    the run's CPU KV tier (``resolved.offload``) a fresh offloading connector, else
    ``connector`` (a P/D instance's, :mod:`sim.engine.pd_cluster`)."""
    engine_cfg = resolved.engine
    cls = AsyncScheduler if uses_async_scheduling(engine_cfg) else Scheduler
    offload = getattr(resolved, "offload", None)
    spec = getattr(resolved, "spec", None)
    if offload is not None:
        connector = build_connector(
            offload, resolved.kv_cache_config, engine_cfg.enable_prefix_caching
        )
    return cls(
        SchedulerConfig(
            max_model_len=resolved.max_model_len,
            max_num_batched_tokens=resolved.max_num_batched_tokens,
            max_num_seqs=resolved.max_num_seqs,
            enable_chunked_prefill=engine_cfg.enable_chunked_prefill,
            long_prefill_token_threshold=engine_cfg.long_prefill_token_threshold,
            policy=engine_cfg.scheduling_policy,
        ),
        resolved.kv_cache_config,
        enable_caching=engine_cfg.enable_prefix_caching,
        **({"connector": connector} if connector is not None else {}),
        **({"speculative_config": spec.config} if spec is not None else {}),
    )


class ReplicaBuilder:
    """The engines of ``num_replicas`` replicas of one resolved run, built one by one
    with :meth:`engine` (the schedulers, the hasher and the DP groups are made first,
    for all replicas)."""

    def __init__(
        self,
        env: simpy.Environment,
        resolved: Any,
        num_replicas: int,
        steps: StepRecorder,
        requests: RequestRecorder,
        *,
        check: bool,
        decisions: IO[str] | None,
        on_progress: Callable[[int], None] | None,
        fast_forward: bool,
    ) -> None:
        engine_cfg = resolved.engine
        self.env = env
        self.resolved = resolved
        self.num_replicas = num_replicas
        self.steps = steps
        self.requests = requests
        self.check = check
        self.decisions = decisions
        self.on_progress = on_progress
        self.fast_forward = fast_forward
        self.offload = getattr(resolved, "offload", None)
        self.spec = getattr(resolved, "spec", None)
        self.loop_async = uses_async_scheduling(engine_cfg)
        # The seed config.yaml records (the workload's own when the run gives none).
        self.run_seed = getattr(resolved, "workload_config", {}).get("seed", resolved.seed)
        self.schedulers = [build_scheduler(resolved) for _ in range(num_replicas)]
        # Hash values never leave the simulation: a cheap 64-bit hash gives the same
        # results as the configured algorithm (see FastBlockHasher); its blocks cover
        # the tokens after them the schedulers ask for (EAGLE's lookahead hashes).
        # Unshared requests' blocks go unkeyed where the schedulers allow it.
        first = self.schedulers[0]
        self.hasher = FastBlockHasher(
            engine_cfg.block_size,
            first.num_hash_lookahead_tokens,
            unkeyed_unshared=first.unkeyed_unshared_ok,
        )
        self.dp = engine_cfg.data_parallel_size
        # A MoE model's DP ranks step in lockstep, one time line per DP group.
        self.groups = (
            [LockstepForwards(env) for _ in range(num_replicas // self.dp)]
            if getattr(resolved, "dp_lockstep", False)
            else []
        )
        self.latency = getattr(resolved, "replica_latency_models", None) or (
            [resolved.latency_model] * num_replicas
        )
        if self.offload is not None and self.groups:
            raise ValueError("DP lockstep runs without a KV connector")
        self.stepped_by = stepping_part(
            offload=self.offload is not None, spec=self.spec is not None, lockstep=bool(self.groups)
        )

    def engine(self, i: int) -> ReplicaEngine:
        """Replica ``i``'s engine (its SimPy process starts with it)."""
        scheduler = self.schedulers[i]
        workload = self.resolved.workload
        parts = ReplicaParts(
            self.env,
            i,
            scheduler,
            self.latency[i],
            self.hasher,
            self.steps,
            self.requests,
            workload,
            check=self.check,
            decisions=self.decisions,
            on_progress=self.on_progress,
        )
        regime = decide_regime(
            fast_forward=self.fast_forward,
            num_replicas=self.num_replicas,
            scheduler=scheduler,
            latency_model=self.latency[i],
            workload=workload,
            stepped_by=self.stepped_by,
        )
        spec = self.spec
        spec_run = None if spec is None else spec.make_run(i, self.run_seed, self.loop_async)
        offload = self.offload
        if offload is None:
            lockstep = self.groups[i // self.dp] if self.groups else None
            return make_replica_engine(parts, regime, spec_run, lockstep)
        # The CPU offload tier: the engine with the tier's worker side.
        worker = OffloadWorker(make_host_link(offload), offload.worker_kv_bytes_per_block)
        return OffloadReplicaEngine(parts, worker, regime, spec_run)
