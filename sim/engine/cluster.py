"""A cluster: N replica engines (one SimPy process each) behind a router.

The workload submits to :meth:`Cluster.submit`, which asks the router for a replica
and hands the request to that replica's engine. Every engine gets the workload
itself as its callback target: a request lives on exactly one replica, so
``on_finish`` reaches the workload once per request, and each engine waits on the
shared ``done()`` / ``all_submitted`` to know when arrivals are over. All engines
write to the same step and request recorders (rows carry the replica id).
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
from sim.engine.input_limits import InputLimits
from sim.engine.offload import OffloadReplicaEngine
from sim.engine.offload_worker import OffloadWorker
from sim.engine.regime import decide_regime, stepping_part
from sim.engine.replica import ReplicaEngine
from sim.engine.replica_async import make_replica_engine
from sim.engine.replica_parts import ReplicaParts, kvcore_request
from sim.engine.router import Router
from sim.records.recorders import RequestRecorder, StepRecorder

_UNCACHEABLE = object()
"""What a prefix-aware router is shown for a request that will be rejected (its prompt
is at least max_model_len tokens): no replica caches any of it, and its prompt is
never hashed (vLLM rejects it before any cache lookup)."""


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


class EngineView:
    """The read-only :class:`sim.engine.router.ReplicaView` of one ``ReplicaEngine``."""

    __slots__ = ("engine",)

    def __init__(self, engine: ReplicaEngine) -> None:
        self.engine = engine

    @property
    def num_outstanding(self) -> int:
        return self.engine.num_outstanding

    @property
    def kv_usage(self) -> float:
        return self.engine.scheduler.kv_cache_manager.block_pool.get_usage()

    def cached_prefix_tokens(self, request: object) -> int:
        """Tokens of the (hashed kvcore) request's prompt cached on this replica now."""
        if request is _UNCACHEABLE:
            return 0
        manager = self.engine.scheduler.kv_cache_manager
        return manager.get_computed_blocks(request)[1]


class Cluster:
    """N replicas of one resolved run behind ``router``."""

    def __init__(
        self,
        env: simpy.Environment,
        resolved: Any,
        num_replicas: int,
        router: Router,
        steps: StepRecorder,
        requests: RequestRecorder,
        *,
        check: bool = False,
        decisions: IO[str] | None = None,
        on_progress: Callable[[int], None] | None = None,
        fast_forward: bool = True,
    ) -> None:
        if num_replicas < 1:
            raise ValueError(f"num_replicas: must be >= 1 (got {num_replicas})")
        if steps.num_replicas != num_replicas:
            raise ValueError(
                f"steps: a recorder for {steps.num_replicas} replica(s), not {num_replicas}"
            )
        engine_cfg = resolved.engine
        offload = getattr(resolved, "offload", None)
        spec = getattr(resolved, "spec", None)
        loop_async = uses_async_scheduling(engine_cfg)
        # The seed config.yaml records (the workload's own when the run gives none).
        run_seed = getattr(resolved, "workload_config", {}).get("seed", resolved.seed)
        self.env = env
        self.router = router
        schedulers = [build_scheduler(resolved) for _ in range(num_replicas)]
        # Hash values never leave the simulation: a cheap 64-bit hash gives the same
        # results as the configured algorithm (see FastBlockHasher); its blocks cover
        # the tokens after them the schedulers ask for (EAGLE's lookahead hashes).
        self.hasher = FastBlockHasher(
            engine_cfg.block_size, schedulers[0].num_hash_lookahead_tokens
        )
        dp = engine_cfg.data_parallel_size
        # A MoE model's DP ranks step in lockstep, one time line per DP group.
        groups = (
            [LockstepForwards(env) for _ in range(num_replicas // dp)]
            if getattr(resolved, "dp_lockstep", False)
            else []
        )
        latency = getattr(resolved, "replica_latency_models", None) or (
            [resolved.latency_model] * num_replicas
        )
        if offload is not None and groups:
            raise ValueError("DP lockstep runs without a KV connector")
        stepped_by = stepping_part(
            offload=offload is not None, spec=spec is not None, lockstep=bool(groups)
        )

        def engine(i: int) -> ReplicaEngine:
            parts = ReplicaParts(
                env,
                i,
                schedulers[i],
                latency[i],
                self.hasher,
                steps,
                requests,
                resolved.workload,
                check=check,
                decisions=decisions,
                on_progress=on_progress,
            )
            regime = decide_regime(
                fast_forward=fast_forward,
                num_replicas=num_replicas,
                scheduler=schedulers[i],
                latency_model=latency[i],
                workload=resolved.workload,
                stepped_by=stepped_by,
            )
            spec_run = None if spec is None else spec.make_run(i, run_seed, loop_async)
            if offload is None:
                lockstep = groups[i // dp] if groups else None
                return make_replica_engine(parts, regime, spec_run, lockstep)
            # The CPU offload tier: the engine with the tier's worker side.
            worker = OffloadWorker(make_host_link(offload), offload.worker_kv_bytes_per_block)
            return OffloadReplicaEngine(parts, worker, regime, spec_run)

        self.engines = [engine(i) for i in range(num_replicas)]
        self.max_model_len: int = resolved.max_model_len
        self.limits = InputLimits(self.max_model_len)
        """Rejected and capped requests (see :mod:`sim.engine.input_limits`)."""
        self.views = [EngineView(e) for e in self.engines]
        self.num_routed = [0] * num_replicas
        if num_replicas == 1:
            self.process: simpy.Event = self.engines[0].process
        else:
            self.process = simpy.AllOf(env, [e.process for e in self.engines])

    def prompt_hashes(self, sr: Any) -> list[Any] | None:
        """The block hashes of a workload request's prompt, as the engines compute them
        (for ``SimRequest.prompt_block_hashes``, computed where the workload is drawn);
        None for a prompt the engines will reject (at least max_model_len tokens),
        whose token ids are then never built."""
        if sr.num_prompt_tokens >= self.max_model_len:
            return None
        return kvcore_request(sr, 0.0, self.hasher).block_hashes

    def _routing_request(self, sr: Any, rejected: bool) -> Any:
        """The request as the router sees it: hashed into blocks when it needs that."""
        if not self.router.needs_prefix:
            return sr
        if rejected:
            return _UNCACHEABLE
        return kvcore_request(sr, self.env.now, self.hasher)

    def submit(self, sr: Any) -> None:
        """Route one arriving request to a replica (a request the replica will reject
        is routed too: routers see every arrival, as they always have)."""
        rejected = self.limits.observe(sr)
        if len(self.engines) == 1:
            i = 0
        else:
            i = self.router.choose(self._routing_request(sr, rejected), self.views)
        self.num_routed[i] += 1
        self.engines[i].submit(sr)

    @property
    def num_rejected(self) -> int:
        """Requests rejected by any replica (prompt of at least max_model_len tokens)."""
        return sum(e.num_rejected for e in self.engines)
