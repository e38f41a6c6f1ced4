"""The JSON lines of a CPU-offload conformance case, one definition for both replays:
kvcore's (:mod:`sim.conformance.offload_kvcore`) and vLLM's (``offload_driver.py``).

A case writes a header, one step line per step (sync) or per engine iteration
(async), and a summary (:func:`sim.conformance.trace_feed.summary_line`). Each side
reads its own objects (kvcore's or vLLM's scheduler, connector and CPU manager) and
hands the values to these functions, which fix the fields and their order. The fake
worker's round (:func:`worker_round`) is shared too: both connectors' metadata carry
``load_jobs``, ``store_jobs`` and ``jobs_to_flush``.

Standard library only: the vLLM driver loads it by path beside it, as it loads its
other siblings, and kvsim imports it as ``sim.conformance.offload_lines``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from sim.conformance.offload_worker import FakeOffloadWorker

MAX_STEPS = 20000
"""Steps after which a replay gives up on a case (it never ends)."""

SYNC_FIELDS = (
    "type",
    "step",
    "scheduled",
    "preempted",
    "finished",
    "aborted",
    "free_blocks_after_schedule",
    "free_blocks",
    "num_running",
    "num_waiting",
    "waiting_for_kv",
    "loads",
    "stores",
    "flush",
    "completed",
    "recving",
    "cpu",
    "prefix_cache",
    "connector_cache",
)
"""The fields of a synchronous step line, in their order."""


def short_key(key: bytes) -> str:
    """An offload key in a line: the first 6 bytes of its block hash (hex), then its
    KV cache group index."""
    return key[:6].hex() + ":" + str(int.from_bytes(key[-4:], "big"))


def header_line(vllm_version: str, num_cpu_chunks: int, max_model_len: int) -> dict[str, Any]:
    """A case's first line: the versions and sizes both sides must agree on
    (``max_model_len`` in tokens)."""
    return {
        "type": "header",
        "vllm_version": vllm_version,
        "num_cpu_chunks": num_cpu_chunks,
        "max_model_len": max_model_len,
    }


def job_line(
    job_id: int, req_id: str, keys: Iterable[bytes], gpu_blocks: list[int], cpu_chunks: list[int]
) -> list[Any]:
    """A load or store job: its id, its request, its offload keys (short, sorted), the
    GPU block ids and the CPU chunk ids it copies between."""
    return [job_id, req_id, sorted(short_key(k) for k in keys), gpu_blocks, cpu_chunks]


def cpu_line(keys: Iterable[bytes], evictable: int, write_pending: int) -> dict[str, Any]:
    """The CPU tier's state: the keys it holds (short, sorted), and its evictable and
    write-pending chunk counts."""
    return {
        "keys": sorted(short_key(k) for k in keys),
        "evictable": evictable,
        "write_pending": write_pending,
    }


def connector_counts(stats: Any) -> list[int]:
    """The connector's prefix-cache counters (requests, queries and hits in tokens);
    zeros when ``stats`` is None."""
    if stats is None:
        return [0, 0, 0]
    return [int(stats.requests), int(stats.queries), int(stats.hits)]


def waiting_for_kv(requests: Iterable[Any], status: Any) -> list[str]:
    """The ids (sorted) of the requests whose status is ``status`` (the side's
    ``WAITING_FOR_REMOTE_KVS``)."""
    return sorted(r.request_id for r in requests if r.status == status)


class WorkerReport(NamedTuple):
    """The fake worker's answer to one batch."""

    flush: list[int]
    """The job ids the scheduler asked to flush (sorted)."""
    completed: dict[int, int]
    """Job id -> 1 (one worker) for the jobs finished by the batch's output."""
    recving: list[str]
    """The requests whose load finished (sorted)."""


def worker_round(worker: FakeOffloadWorker, step: int, meta: Any) -> WorkerReport:
    """Hand a batch's connector metadata to the fake worker in step ``step`` and take
    its report for that step."""
    flush = sorted(meta.jobs_to_flush or ())
    worker.submit(
        step, {j: job.req_id for j, job in meta.load_jobs.items()}, list(meta.store_jobs), flush
    )
    completed, recving = worker.finished(step)
    return WorkerReport(flush, completed, recving)


def batch_fields(
    out: Any, free_after: int, loads: list[Any], stores: list[Any], report: WorkerReport
) -> dict[str, Any]:
    """A scheduled batch's fields: the tokens per request, the preemptions, the free
    GPU blocks right after ``schedule()``, its jobs and the worker's report."""
    return {
        "scheduled": [{"id": rid, "n": n} for rid, n in out.num_scheduled_tokens.items()],
        "preempted": sorted(out.preempted_req_ids or ()),
        "free_blocks_after_schedule": free_after,
        "loads": loads,
        "stores": stores,
        "flush": report.flush,
        "completed": sorted(report.completed),
        "recving": report.recving,
    }


def applied_fields(
    finished: list[str], prefix_cache: dict[str, int] | None, connector_cache: list[int] | None
) -> dict[str, Any]:
    """An applied output's fields: the requests it finished and the prefix-cache
    counters (GPU and connector) it reported; :func:`nothing_applied` for none."""
    return {"finished": finished, "prefix_cache": prefix_cache, "connector_cache": connector_cache}


def nothing_applied() -> dict[str, Any]:
    """The applied-output fields of an engine iteration that applied no output."""
    return applied_fields([], None, None)


def state_fields(
    free_blocks: int, num_running: int, num_waiting: int, waiting: list[str], cpu: dict[str, Any]
) -> dict[str, Any]:
    """The scheduler's state at the end of a step: free GPU blocks, request counts,
    the requests waiting for their KV, the CPU tier (:func:`cpu_line`)."""
    return {
        "free_blocks": free_blocks,
        "num_running": num_running,
        "num_waiting": num_waiting,
        "waiting_for_kv": waiting,
        "cpu": cpu,
    }


def sync_line(
    step: int,
    aborted: list[str],
    batch: dict[str, Any],
    applied: dict[str, Any],
    state: dict[str, Any],
) -> dict[str, Any]:
    """A synchronous step's line, from its batch, applied-output and state fields."""
    fields = {"type": "step", "step": step, "aborted": aborted, **batch, **applied, **state}
    return {k: fields[k] for k in SYNC_FIELDS}


def async_line(
    step: int,
    aborted: list[str],
    batch: dict[str, Any] | None,
    applied_step: int | None,
    applied: dict[str, Any],
    state: dict[str, Any],
    in_flight: list[int],
) -> dict[str, Any]:
    """An engine iteration's line: the batch it scheduled (None: no batch), the step
    whose batch's output it applied, that output's fields, the state, and the steps
    of the batches still in flight."""
    return {
        "type": "step",
        "step": step,
        "aborted": aborted,
        **(batch if batch is not None else {"scheduled": None}),
        "applied_step": applied_step,
        **applied,
        **state,
        "in_flight": in_flight,
    }
