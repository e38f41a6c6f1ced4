"""What a replica's engine is built from, and what it keeps of each request it runs.

:class:`ReplicaParts` is made once per replica by the cluster (:mod:`sim.engine.cluster`)
or the P/D proxy (:mod:`sim.engine.pd_cluster`); :func:`kvcore_request` turns a workload
request into kvcore's ``Request`` (the engine at admission, the routers for their prefix
lookups); :class:`RequestMeta` is the engine's note of a request between its arrival and
its record. Units: seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

import simpy

from kvcore.block_hashing import FastBlockHasher
from kvcore.request import LoRARequest, Request
from kvcore.scheduler import Scheduler
from sim.records.recorders import StepRecorder
from sim.records.request_recorder import RequestRecorder


def kvcore_request(sr: Any, now: float, hasher: FastBlockHasher) -> Request:
    """The kvcore ``Request`` of a workload request ``sr`` arriving at ``now`` (s),
    hashed into blocks by ``hasher`` (by its ``for_unshared`` when ``sr`` is
    unshared)."""
    return Request(
        sr.request_id,
        sr.prompt_token_ids,
        sr.max_tokens,
        arrival_time=now,
        priority=sr.priority,
        lora_request=LoRARequest.from_id(sr.lora_id) if sr.lora_id else None,
        cache_salt=sr.cache_salt,
        block_hasher=hasher.for_unshared if sr.unshared else hasher,
        block_hashes=sr.prompt_block_hashes or (),
        unshared=sr.unshared,
    )


class RequestMeta:
    """A running request's arrival (s), first token (s; -1 before it) and prompt
    length (tokens), for its requests.csv row."""

    __slots__ = ("arrival_s", "first_token_s", "prompt_tokens")

    def __init__(self, arrival_s: float, prompt_tokens: int) -> None:
        self.arrival_s = arrival_s
        self.first_token_s = -1.0
        self.prompt_tokens = prompt_tokens


@dataclass(frozen=True)
class ReplicaParts:
    """What every replica's engine is built from (:class:`sim.engine.replica.ReplicaEngine`
    and its subclasses; the cluster or the P/D proxy makes one per replica)."""

    env: simpy.Environment
    replica_id: int
    """The replica's id in steps.csv and requests.csv."""
    scheduler: Scheduler
    latency_model: Any
    hasher: FastBlockHasher
    steps: StepRecorder
    requests: RequestRecorder
    workload: Any
    check: bool = False
    """Check the scheduler's invariants after every step."""
    decisions: IO[str] | None = None
    """Where to write decisions.jsonl's lines; None: nowhere."""
    on_progress: Callable[[int], None] | None = None
    """Called with the number of requests that just finished."""
