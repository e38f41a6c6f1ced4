"""The CPU KV offload tier's worker side of one replica, timed on its host link.

kvcore's :class:`kvcore.offloading_connector.OffloadingConnectorScheduler` decides which
blocks move; this is what vLLM 0.33.0's ``OffloadingConnectorWorker``
(``vllm/distributed/kv_transfer/kv_connector/v1/offloading/worker.py``) does with
the metadata of each step or batch, in simulated time on a
:class:`sim.engine.offload_transfers.HostLink` (see that module for the plan):

- :meth:`OffloadWorker.start` at the step's start ``t0``: the step's flushed stores
  and the stores the step before deferred are submitted (``handle_preemptions``), the
  compute waits for the flushed ones, the loads are submitted (``start_kv_transfers``)
  and the step's other stores wait for the next step (``prepare_store_kv``);
- :meth:`OffloadWorker.finished` at the step's end: the transfers ended by then, as the
  step's ``KVConnectorOutput`` (``get_finished`` with the worker metadata's
  ``completed_jobs``).

The engine (:mod:`sim.engine.replica`) owns one per replica and calls these; the worker owns
the link, the deferred stores, which request each load is for, and the tier's
:class:`sim.app.kv_offload.OffloadStats`. Units: bytes, seconds.
"""

from __future__ import annotations

from kvcore.offloading_connector import (
    KVConnectorOutput,
    OffloadingConnectorMetadata,
    OffloadingConnectorScheduler,
)
from sim.app.kv_offload import OffloadStats
from sim.engine.offload_transfers import HostLink, job_bytes


class OffloadWorker:
    """The worker side of the CPU offload tier for one replica (all its TP workers:
    they move their shards in parallel, so one link stands for them)."""

    def __init__(self, link: HostLink, block_bytes: int) -> None:
        """``block_bytes``: one GPU block's KV bytes on one TP rank (what a transfer
        moves per block)."""
        self.link = link
        self.block_bytes = block_bytes
        self.stats = OffloadStats()
        self._deferred_stores: list[tuple[int, int]] = []  # (job id, blocks): next step's
        self._load_reqs: dict[int, str] = {}  # load job id -> its request (vLLM's _load_jobs)

    @property
    def has_deferred_stores(self) -> bool:
        """Whether stores wait to be submitted at the next step's start."""
        return bool(self._deferred_stores)

    def next_done_s(self) -> float | None:
        """When the next transfer in flight ends (s); None when none is."""
        return self.link.next_done_s()

    def start(self, meta: OffloadingConnectorMetadata, t0: float) -> float:
        """Submit a step's transfers at its start ``t0`` (s); return when its compute can
        start (after the flushed stores end)."""
        stats = self.stats
        link = self.link
        per_block = self.block_bytes
        flush = meta.jobs_to_flush
        submit = [(j, len(job.gpu_block_ids)) for j, job in meta.store_jobs.items() if j in flush]
        submit += self._deferred_stores
        self._deferred_stores = [
            (j, len(job.gpu_block_ids)) for j, job in meta.store_jobs.items() if j not in flush
        ]
        for job_id, blocks in submit:
            num_bytes = job_bytes(blocks, per_block)
            link.submit_store(job_id, num_bytes, t0)
            stats.num_stores += 1
            stats.store_blocks += blocks
            stats.store_bytes += num_bytes
            stats.store_s += link.stores.last_duration_s
        start = max(t0, link.wait_s(flush)) if flush else t0
        for job_id, job in meta.load_jobs.items():
            blocks = len(job.gpu_block_ids)
            num_bytes = job_bytes(blocks, per_block)
            link.submit_load(job_id, num_bytes, start)
            self._load_reqs[job_id] = job.req_id
            stats.num_loads += 1
            stats.load_blocks += blocks
            stats.load_bytes += num_bytes
            stats.load_s += link.loads.last_duration_s
        return start

    def finished(self, now: float, num_workers: int) -> KVConnectorOutput:
        """The step's ``KVConnectorOutput``: the transfers ended by ``now`` (s), each
        reported by every one of ``num_workers`` TP workers; a finished load's request
        in ``finished_recving``."""
        kvo = KVConnectorOutput()
        done = self.link.collect_finished(now)
        if done:
            kvo.completed_jobs = {job_id: num_workers for job_id in done}
            loads = self._load_reqs
            kvo.finished_recving = {loads.pop(j) for j in done if j in loads}
        return kvo

    def note_cpu_usage(self, connector: OffloadingConnectorScheduler) -> None:
        """Track the CPU tier's peak (blocks ``connector`` holds, ready or being
        written)."""
        held = connector.manager.num_stored_chunks() * connector.blocks_per_chunk
        if held > self.stats.peak_cpu_blocks:
            self.stats.peak_cpu_blocks = held
