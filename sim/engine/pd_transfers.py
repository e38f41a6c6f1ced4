"""When P/D KV reads end: each instance's NIC, one queue per direction.

kvcore's :class:`kvcore.nixl_connector.NixlConnectorScheduler` decides *which* blocks
a decode instance reads (``reqs_to_recv``: its unhashed blocks, one read per request);
this says *when* the read ends, after vLLM 0.33.0's NIXL worker (pull mode, its
default): in the step whose connector metadata lists the receive, the decode worker
posts one RDMA READ of the request's blocks from the prefill instance's GPU
(``start_load_kv``); the read completes ``latency_s + bytes / link_bytes_per_s``
after it starts, and each side's worker reports it at its next step's end
(``get_finished``: ``finished_recving`` on the decode side; the prefill side gets the
read's notification and reports ``finished_sending``, so its scheduler frees the
blocks).

Queueing: a read occupies the prefill instance's outbound direction and the decode
instance's inbound direction (full-duplex NICs: the two directions are separate);
reads on one direction run one after another in submission order, so a read starts
when both its directions are free (the simulation submits in time order, so this is
first come, first served). With tensor parallelism every rank moves its own shard
over its own NIC at the same time: ``bytes`` is one rank's share on the side that
moves more per rank (the smaller TP size, when the pools' differ: :mod:`sim.app.pd_setup`)
and one queue stands for all ranks.

Units: bytes, seconds, bytes per second.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.engine.offload_transfers import job_bytes, transfer_seconds


@dataclass
class PDRead:
    """One request's KV read: ``num_blocks`` blocks, ``num_bytes`` on one rank, from
    prefill instance ``source`` to decode instance ``dest``; submitted at
    ``submit_s``, on the link from ``start_s`` to ``end_s`` (seconds)."""

    request_id: str
    source: int
    dest: int
    num_blocks: int
    num_bytes: int
    submit_s: float
    start_s: float
    end_s: float


@dataclass
class PDLinks:
    """The NICs of every instance of a P/D deployment (one rank stands for all).

    ``link_bytes_per_s``: one direction of one rank's NIC; ``latency_s``: fixed cost
    per read; ``bytes_per_block``: one KV block on one rank."""

    link_bytes_per_s: float
    latency_s: float
    bytes_per_block: int
    _out_busy: dict[int, float] = field(default_factory=dict)
    _in_busy: dict[int, float] = field(default_factory=dict)
    reads: list[PDRead] = field(default_factory=list)
    """Every read submitted, in submission order."""

    def submit(
        self, request_id: str, source: int, dest: int, num_blocks: int, ready_s: float
    ) -> PDRead:
        """Queue a read that may start at ``ready_s`` (s) from ``source``'s outbound
        to ``dest``'s inbound direction; returns it (with when it ends)."""
        num_bytes = job_bytes(num_blocks, self.bytes_per_block)
        start = max(ready_s, self._out_busy.get(source, 0.0), self._in_busy.get(dest, 0.0))
        end = start + transfer_seconds(num_bytes, self.link_bytes_per_s, self.latency_s)
        self._out_busy[source] = end
        self._in_busy[dest] = end
        read = PDRead(request_id, source, dest, num_blocks, num_bytes, ready_s, start, end)
        self.reads.append(read)
        return read
