"""How long KV offload transfers take on the host link (GPU <-> CPU memory).

The CPU KV offload tier's timing (kvcore's :mod:`kvcore.offloading_connector` decides
*which* blocks move; this says *when* the copies end); the engine uses it as planned
below, per step in the synchronous loop (:meth:`sim.engine.offload.OffloadReplicaEngine._run_steps`)
and per batch with async scheduling, where ``t0`` is when the GPU reaches the batch
and ``t1`` its end (:meth:`sim.engine.connector.ConnectorEngine._run_batch_queue_connector`),
through the replica's :class:`sim.engine.offload_worker.OffloadWorker`.

What it models, after vLLM 0.33.0's CPU offloading worker
(``vllm/v1/kv_offload/cpu/gpu_worker.py``): one queue per direction
(``SingleDirectionOffloadingHandler``: stores GPU->CPU, loads CPU->GPU); within a
direction transfers run one after another in submission order, and the two
directions run at the same time (separate CUDA streams; PCIe and NVLink-C2C are full
duplex). A transfer takes ``overhead_s + bytes / bandwidth``. With tensor
parallelism every worker moves its own shard of each block over its own link at the
same time, so ``bytes`` is one worker's share (:func:`job_bytes`).

Units: bytes, seconds, bytes per second.

Use by the engine (one :class:`HostLink` per replica; TP workers move their
shards in parallel, so one link stands for all of them), per scheduled step that
starts at ``t0`` and computes for ``d`` seconds:

1. ``out.kv_connector_metadata`` (an ``OffloadingConnectorMetadata``) lists the step's
   load and store jobs, ``job_bytes(len(job.gpu_block_ids), worker_kv_bytes_per_block)``
   bytes each. Stores are submitted at the *next* step's start ``t0`` (vLLM's worker
   defers them so that they start after the sampling copies: ``prepare_store_kv``),
   except those in the step's own ``jobs_to_flush``, submitted at its ``t0``.
2. ``jobs_to_flush`` are waited for before the forward pass (``handle_preemptions``):
   the step computes from ``start = max(t0, link.wait_s(flush))``; its loads are
   submitted at ``start`` (``start_kv_transfers`` runs after that wait).
3. At the step's end ``t1 = start + d``, ``link.collect_finished(t1)`` are the finished
   jobs: ``KVConnectorOutput(finished_recving={request of each finished load},
   completed_jobs={job: number of workers})`` goes to ``update_from_output``.
4. A step that schedules nothing while transfers are in flight (requests waiting in
   ``WAITING_FOR_REMOTE_KVS``, pending stores: ``Scheduler.has_requests()`` is True)
   still submits and collects (vLLM's ``kv_connector_no_forward``); when nothing ended
   the clock advances to the next transfer's end (or the next arrival).
"""

from __future__ import annotations

from dataclasses import dataclass, field


def transfer_seconds(num_bytes: int, bytes_per_s: float, overhead_s: float = 0.0) -> float:
    """Seconds to move ``num_bytes`` at ``bytes_per_s`` after a fixed ``overhead_s``
    (launch and synchronisation cost of one transfer); 0 bytes take no time."""
    if bytes_per_s <= 0:
        raise ValueError(f"bandwidth must be > 0 bytes/s, got {bytes_per_s}")
    if num_bytes < 0 or overhead_s < 0:
        raise ValueError("bytes and overhead must be >= 0")
    if num_bytes == 0:
        return 0.0
    return overhead_s + num_bytes / bytes_per_s


def job_bytes(num_gpu_blocks: int, worker_kv_bytes_per_block: int) -> int:
    """Bytes one worker moves for a job of ``num_gpu_blocks`` blocks (all offloaded
    layers of a block: vLLM's ``worker_kv_bytes_per_block``)."""
    if num_gpu_blocks < 0 or worker_kv_bytes_per_block < 0:
        raise ValueError("block counts and sizes must be >= 0")
    return num_gpu_blocks * worker_kv_bytes_per_block


@dataclass
class DirectionQueue:
    """One direction of the host link: a FIFO of transfers, one at a time.

    ``bytes_per_s``: the direction's sustained bandwidth; ``overhead_s``: fixed cost
    per transfer."""

    bytes_per_s: float
    overhead_s: float = 0.0
    busy_until_s: float = 0.0
    """When the last submitted transfer ends (s)."""
    last_duration_s: float = 0.0
    """How long the last submitted transfer takes on the link (s), queueing excluded."""
    _done_s: dict[int, float] = field(default_factory=dict)

    def submit(self, job_id: int, num_bytes: int, ready_s: float) -> float:
        """Queue a transfer that may start at ``ready_s`` (s); returns when it ends."""
        if job_id in self._done_s:
            raise ValueError(f"job {job_id} already submitted")
        start = max(ready_s, self.busy_until_s)
        self.last_duration_s = transfer_seconds(num_bytes, self.bytes_per_s, self.overhead_s)
        done = start + self.last_duration_s
        self.busy_until_s = done
        self._done_s[job_id] = done
        return done

    def done_at(self, job_id: int) -> float:
        """When a submitted, not yet collected transfer ends (s)."""
        return self._done_s[job_id]

    def collect_finished(self, now_s: float) -> list[int]:
        """The transfers ended by ``now_s``, in submission order; they are forgotten."""
        done = [j for j, t in self._done_s.items() if t <= now_s]
        for j in done:
            del self._done_s[j]
        return done

    def pending(self) -> int:
        return len(self._done_s)

    def next_done_s(self) -> float | None:
        """When the first pending transfer ends (s); None when none is pending."""
        return min(self._done_s.values(), default=None)


@dataclass
class HostLink:
    """Both directions of one worker's host link. ``h2d_bytes_per_s``: CPU->GPU
    (loads); ``d2h_bytes_per_s``: GPU->CPU (stores)."""

    h2d_bytes_per_s: float
    d2h_bytes_per_s: float
    overhead_s: float = 0.0
    loads: DirectionQueue = field(init=False)
    stores: DirectionQueue = field(init=False)

    def __post_init__(self) -> None:
        self.loads = DirectionQueue(self.h2d_bytes_per_s, self.overhead_s)
        self.stores = DirectionQueue(self.d2h_bytes_per_s, self.overhead_s)

    def submit_load(self, job_id: int, num_bytes: int, ready_s: float) -> float:
        return self.loads.submit(job_id, num_bytes, ready_s)

    def submit_store(self, job_id: int, num_bytes: int, ready_s: float) -> float:
        return self.stores.submit(job_id, num_bytes, ready_s)

    def wait_s(self, job_ids: set[int] | list[int]) -> float:
        """When every listed, not yet collected job has ended (a flush waits for it);
        0.0 when none is pending."""
        ends = [q.done_at(j) for j in job_ids for q in (self.loads, self.stores) if j in q._done_s]
        return max(ends, default=0.0)

    def next_done_s(self) -> float | None:
        """When the next pending transfer of either direction ends (s); None: none."""
        ends = [t for t in (self.loads.next_done_s(), self.stores.next_done_s()) if t is not None]
        return min(ends, default=None)

    def collect_finished(self, now_s: float) -> list[int]:
        """Jobs of both directions ended by ``now_s`` (stores first, as vLLM's
        ``CPUOffloadingWorker.get_finished`` lists them)."""
        return self.stores.collect_finished(now_s) + self.loads.collect_finished(now_s)
