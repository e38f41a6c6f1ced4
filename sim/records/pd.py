"""What a P/D run adds to its outputs: requests.csv columns and summary.json's ``pd``.

Only P/D runs write these (every other run's files are unchanged). ``requests.csv``
gains, after its usual columns, per request (seconds; the four parts add up to
``first_token_s - arrival_s``, see :mod:`sim.engine.pd_cluster`):

``prefill_instance``, ``decode_instance`` (indices within each pool; ``replica`` is
the decode instance's id in steps.csv, where prefill instances come first),
``prefill_queue_s``, ``prefill_s``, ``transfer_s``, ``decode_queue_s``,
``transfer_blocks`` (blocks read), ``transfer_bytes`` (over all TP ranks).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import numpy as np

from sim.records.step_rows import fmt

PD_REQUEST_COLUMNS = (
    "prefill_instance",
    "decode_instance",
    "prefill_queue_s",
    "prefill_s",
    "transfer_s",
    "decode_queue_s",
    "transfer_blocks",
    "transfer_bytes",
)


def append_pd_columns(path: Path, rows: dict[str, tuple[Any, ...]]) -> None:
    """Rewrite the finished ``requests.csv`` at ``path`` with :data:`PD_REQUEST_COLUMNS`
    after its own (rows keep their order; every row's request is in ``rows``)."""
    tmp = path.with_name(path.name + ".pd")
    with path.open(newline="") as src, tmp.open("w", newline="") as dst:
        reader = csv.reader(src)
        writer = csv.writer(dst, lineterminator="\n")
        writer.writerow([*next(reader), *PD_REQUEST_COLUMNS])
        for row in reader:
            extra = rows[row[0]]
            writer.writerow([*row, *(fmt(v) if isinstance(v, float) else v for v in extra)])
    os.replace(tmp, path)


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p99": 0.0}
    a = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(a.mean()),
        "p50": float(np.percentile(a, 50)),
        "p99": float(np.percentile(a, 99)),
    }


def _pool(engines: list[Any], duration_s: float) -> dict[str, Any]:
    steps = sum(e.num_steps for e in engines)
    return {
        "replicas": len(engines),
        "utilization": [e.busy_s / duration_s if duration_s > 0 else 0.0 for e in engines],
        "utilization_mean": (
            sum(e.busy_s for e in engines) / (duration_s * len(engines)) if duration_s > 0 else 0.0
        ),
        "waiting_mean": sum(e.waiting_sum for e in engines) / steps if steps else 0.0,
        "waiting_max": max((e.waiting_max for e in engines), default=0),
        "num_steps": steps,
        "blocks_in_use_at_end": sum(
            e.pool.num_gpu_blocks - 1 - e.pool.get_num_free_blocks() for e in engines
        ),
    }


def pd_summary(cluster: Any, duration_s: float) -> dict[str, Any]:
    """``summary.json``'s ``pd`` block: per pool (replicas, busy fraction of the run's
    simulated time per instance and its mean, waiting requests per step: mean and
    max, KV blocks still held when the run ended: 0 unless blocks leak), the
    transfers (count, blocks, bytes over all TP ranks, seconds from post to end:
    mean, p50, p99) and the TTFT parts over finished requests (seconds)."""
    setup = cluster.setup
    reads = cluster.links.reads
    parts = list(cluster.rows.values())
    return {
        "prefill": _pool(cluster.prefill, duration_s),
        "decode": _pool(cluster.decode, duration_s),
        "kv_transfer_gbps": setup.link_bytes_per_s / 1e9,
        "kv_transfer_latency_us": setup.latency_s * 1e6,
        "transfers": {
            "count": len(reads),
            "blocks": sum(r.num_blocks for r in reads),
            "bytes": setup.read_bytes(sum(r.num_blocks for r in reads)),
            "seconds": _stats([r.end_s - r.submit_s for r in reads]),
            "link_seconds_mean": (
                sum(r.end_s - r.start_s for r in reads) / len(reads) if reads else 0.0
            ),
        },
        "ttft_parts_s": {
            name: _stats([p[k] for p in parts])
            for k, name in (
                (2, "prefill_queue"),
                (3, "prefill"),
                (4, "transfer"),
                (5, "decode_queue"),
            )
        },
    }
