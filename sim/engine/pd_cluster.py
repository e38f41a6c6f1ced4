"""Prefill/decode disaggregation: a prefill pool, a decode pool and the proxy.

**How a user asks for it.** ``kvsim run WORKLOAD --pd prefill=P,decode=D``
(``RunSpec.pd``, :mod:`sim.app.pd_config`; either engine loop): ``P`` prefill
instances (vLLM's ``--kv-transfer-config '{"kv_connector": "NixlConnector",
"kv_role": "kv_producer"}'``) and ``D`` decode instances (``kv_role:
kv_consumer``), each one replica of the run's model, GPU, tensor-parallel size,
engine arguments and KV budget, or, with ``--pd FILE.yaml``, of its pool's own GPU and
engine arguments (:mod:`sim.app.pd_setup`). ``--router`` picks the instance within each pool, for
each pool separately (default ``round_robin``, as vLLM's example proxy cycles
through its instances; ``least_outstanding`` as llm-d's load-aware pickers).

**What the proxy does** (after vLLM's disaggregated-serving example proxy): an
arriving request goes to a prefill instance with ``kv_transfer_params
{"do_remote_decode": true}`` and ``max_tokens`` 1; that instance computes the prompt
and its first token, finishes, and its NIXL connector keeps the blocks (delay free)
and returns the parameters the decode side needs (``remote_block_ids``,
``remote_engine_id``, ...). The proxy at once (no control-plane latency) sends the
request, with its own ``max_tokens`` and those parameters, to a decode instance,
whose scheduler allocates the prompt's blocks and parks it in
``WAITING_FOR_REMOTE_KVS``; its worker reads the blocks (:mod:`sim.engine.pd_transfers`:
``blocks x bytes per block`` on one TP rank over that rank's NIC,
``kv_transfer_latency_us + bytes / kv_transfer_gbps``, FIFO per NIC direction); when
the read ends the decode scheduler recomputes the last prompt token (vLLM's: the
first token comes from the decode instance) and decodes, and the prefill instance
reports ``finished_sending`` and frees the blocks. The first token the client sees
is the decode instance's (the prefill instance's is dropped, as the proxy drops it).

**TTFT split** (``requests.csv`` of a P/D run, seconds; they add up to
``first_token_s - arrival_s``): ``prefill_queue_s`` (arrival to the first prefill
step that schedules it), ``prefill_s`` (to the end of the step that finished it),
``transfer_s`` (from the decode step that posted its read to the read's end, queueing
on the NICs included; 0 without a read), ``decode_queue_s`` (the rest: waiting for
decode blocks before the read, and from the read's end to the first token, the
step that computes it included).

**Fast-forward** is off for P/D runs: every step is stepped, with its transfers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

import simpy

from kvcore.block_hashing import FastBlockHasher
from kvcore.nixl_connector import NixlConnectorScheduler
from kvcore.request import Request
from kvcore.scheduler import Scheduler
from sim.engine.cluster import _UNCACHEABLE, EngineView, prepare_prompt
from sim.engine.input_limits import InputLimits
from sim.engine.pd import PDReplicaEngine, Role
from sim.engine.pd_transfers import PDLinks, PDRead
from sim.engine.replica_build import build_scheduler
from sim.engine.replica_parts import ReplicaParts, kvcore_request
from sim.engine.router import Router, make_router
from sim.errors import SimulationStuck
from sim.records.recorders import StepRecorder
from sim.records.request_recorder import RequestRecorder
from workloads.process import Prepared


@dataclass
class PDTimes:
    """One request's path through the deployment (seconds; -1: not yet)."""

    sim_request: Any
    arrival_s: float
    prefill: int
    prefill_start_s: float = -1.0
    prefill_end_s: float = -1.0
    decode: int = -1
    read: PDRead | None = None


def _engine_id(role: Role, index: int) -> str:
    return f"{role}-{index}"


class PDCluster:
    """The prefill and decode pools of one resolved P/D run behind the proxy."""

    def __init__(
        self,
        env: simpy.Environment,
        resolved: Any,
        router: str,
        steps: StepRecorder,
        requests: RequestRecorder,
        *,
        check: bool = False,
        decisions: IO[str] | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        pd = resolved.pd
        assert pd is not None
        self.env = env
        self.setup = pd
        self.workload = resolved.workload
        self.links = PDLinks(pd.link_bytes_per_s, pd.latency_s, pd.worker_kv_bytes_per_block)
        self.times: dict[str, PDTimes] = {}
        self.rows: dict[str, tuple[Any, ...]] = {}
        """requests.csv's P/D columns per finished request (:mod:`sim.records.pd`)."""
        runs = {role: pd.run_for(role, resolved) for role in ("prefill", "decode")}
        schedulers = {
            role: [self._scheduler(runs[role], role, i) for i in range(n)]
            for role, n in (("prefill", pd.num_prefill), ("decode", pd.num_decode))
        }
        self.hasher = FastBlockHasher(
            resolved.engine.block_size, schedulers["prefill"][0].num_hash_lookahead_tokens
        )

        def make(role: Role, i: int, rid: int, done: Callable[[], bool]) -> PDReplicaEngine:
            parts = ReplicaParts(
                env,
                rid,
                schedulers[role][i],
                runs[role].latency_model,
                self.hasher,
                steps,
                requests,
                resolved.workload,
                check=check,
                decisions=decisions,
                on_progress=on_progress,
            )
            return PDReplicaEngine(parts, role, i, self, done)

        self.prefill = [make("prefill", i, i, self.workload.done) for i in range(pd.num_prefill)]
        self.decode = [
            make("decode", j, pd.num_prefill + j, self._prefill_drained)
            for j in range(pd.num_decode)
        ]
        self.engines = self.prefill + self.decode
        self.routers: dict[Role, Router] = {
            "prefill": make_router(router),
            "decode": make_router(router),
        }
        self.views = {
            "prefill": [EngineView(e) for e in self.prefill],
            "decode": [EngineView(e) for e in self.decode],
        }
        self.max_model_len: int = resolved.max_model_len
        self.limits = InputLimits(self.max_model_len)
        self.num_routed = [0] * len(self.engines)
        self.process: simpy.Event = simpy.AllOf(env, [e.process for e in self.engines])

    @staticmethod
    def _scheduler(resolved: Any, role: Role, index: int) -> Scheduler:
        """A fresh scheduler with a NIXL connector of ``role``'s kv_role."""
        connector = NixlConnectorScheduler(
            resolved.kv_cache_config,
            "kv_producer" if role == "prefill" else "kv_consumer",
            engine_id=_engine_id(role, index),
        )
        return build_scheduler(resolved, connector)

    def _prefill_drained(self) -> bool:
        """No request will reach a decode instance any more."""
        return self.workload.done() and all(e.num_outstanding == 0 for e in self.prefill)

    # -- the workload's side -------------------------------------------------------

    def prepare_prompt(self, sr: Any) -> Prepared | None:
        """:func:`sim.engine.cluster.prepare_prompt` for this cluster's engines."""
        return prepare_prompt(sr, self.max_model_len, self.hasher)

    def _choose(self, role: Role, sr: Any, rejected: bool) -> int:
        views = self.views[role]
        if len(views) == 1:
            return 0
        router = self.routers[role]
        routed: Any = sr
        if router.needs_prefix:
            routed = _UNCACHEABLE if rejected else kvcore_request(sr, self.env.now, self.hasher)
        return router.choose(routed, views)

    def submit(self, sr: Any) -> None:
        """An arrival: to a prefill instance (a request it will reject is routed too)."""
        rejected = self.limits.observe(sr)
        i = self._choose("prefill", sr, rejected)
        self.num_routed[i] += 1
        if not rejected:
            self.times[sr.request_id] = PDTimes(sr, self.env.now, i)
        self.prefill[i].submit(sr)
        if rejected and self._prefill_drained():
            self._wake_decode()

    @property
    def num_rejected(self) -> int:
        return sum(e.num_rejected for e in self.engines)

    # -- what the instances report -------------------------------------------------

    def note_prefill_scheduled(self, scheduled: dict[str, int], t0: float) -> None:
        """A prefill step starting at ``t0`` (s) schedules these requests."""
        times = self.times
        for rid in scheduled:
            t = times[rid]
            if t.prefill_start_s < 0:
                t.prefill_start_s = t0

    def prefill_finished(
        self, rid: str, params: dict[str, Any] | None, req: Request, now: float
    ) -> None:
        """A prefill instance finished ``rid`` at ``now`` (s): hand it to a decode one."""
        t = self.times[rid]
        t.prefill_end_s = now
        if params is None:
            raise SimulationStuck(f"prefill instance {t.prefill}: {rid} finished with no KV")
        params = {**params, "remote_host": _engine_id("prefill", t.prefill), "remote_port": 0}
        j = self._choose("decode", t.sim_request, False)
        t.decode = j
        self.num_routed[self.setup.num_prefill + j] += 1
        self.decode[j].submit_remote(t.sim_request, params)
        if self._prefill_drained():
            self._wake_decode()

    def _wake_decode(self) -> None:
        for e in self.decode:
            e.poke()

    def start_read(self, rid: str, dest: int, num_blocks: int, t0: float) -> None:
        """Decode instance ``dest`` posts ``rid``'s read at ``t0`` (s)."""
        t = self.times[rid]
        read = self.links.submit(rid, t.prefill, dest, num_blocks, t0)
        t.read = read
        timer = self.env.timeout(read.end_s - self.env.now)
        timer.callbacks.append(lambda _event: self._read_done(read))

    def _read_done(self, read: PDRead) -> None:
        self.decode[read.dest].report_recv(read.request_id)
        self.prefill[read.source].report_sent(read.request_id)

    def decode_finished(self, rid: str, first_token_s: float, now: float) -> None:
        """A decode instance finished ``rid``: its P/D columns (see the module)."""
        t = self.times.pop(rid)
        read = t.read
        prefill_queue = t.prefill_start_s - t.arrival_s
        prefill = t.prefill_end_s - t.prefill_start_s
        transfer = 0.0 if read is None else read.end_s - read.submit_s
        decode_queue = first_token_s - t.prefill_end_s - transfer
        self.rows[rid] = (
            t.prefill,
            t.decode,
            prefill_queue,
            prefill,
            transfer,
            decode_queue,
            0 if read is None else read.num_blocks,
            0 if read is None else self.setup.read_bytes(read.num_blocks),
        )

    def run(self) -> None:
        """Simulate until every instance is done; SimulationStuck when requests are
        left on their way with nothing more to happen (a decode instance that cannot
        take them)."""
        try:
            self.env.run(until=self.process)
        except RuntimeError as e:
            if "until" not in str(e):
                raise
            stuck = True
        else:
            stuck = bool(self.times)
        if stuck:
            raise SimulationStuck(
                f"P/D: {len(self.times)} requests never finished (the instances' KV "
                "caches cannot take them)"
            )
