"""A ``vllm bench serve --save-result --save-detailed`` JSON as a measured run.

The detailed result lists, per request in sending order, ``start_times`` (the client's
clock, seconds), ``ttfts`` and ``latencies`` (seconds, client-side), ``input_lens`` and
``output_lens`` (tokens), and ``errors`` (empty for a success). kvsim replays the
successful requests as a trace (arrival = start time - the first one's) and takes the
engine-side times as the client-side ones less the API server's costs
(:class:`calibrate.frontend.FrontendModel`, its defaults): what a fit to engine-side
step times needs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from calibrate.frontend import FrontendModel
from calibrate.trace_fit.fit import Measured

FIELDS = ("start_times", "ttfts", "latencies", "input_lens", "output_lens")


def detailed_requests(
    result: dict[str, Any], path: str, frontend: FrontendModel | None = None
) -> tuple[Measured, list[dict[str, Any]]]:
    """``(measured engine-side times, trace records)`` of a detailed result."""
    missing = [f for f in FIELDS if not isinstance(result.get(f), list)]
    if missing:
        raise ValueError(
            f"--from-trace {path}: a vllm bench serve result without {', '.join(missing)}: "
            "run the benchmark with --save-result --save-detailed"
        )
    n = len(result["start_times"])
    if any(len(result[f]) != n for f in FIELDS):
        raise ValueError(f"--from-trace {path}: the per-request lists differ in length")
    errors = result.get("errors") or [""] * n
    start = np.asarray(result["start_times"], dtype=np.float64)
    ttft = np.asarray(result["ttfts"], dtype=np.float64)
    latency = np.asarray(result["latencies"], dtype=np.float64)
    prompt = np.asarray(result["input_lens"], dtype=np.int64)
    output = np.asarray(result["output_lens"], dtype=np.int64)
    ok = (latency > 0) & (output >= 1) & np.array([not e for e in errors])
    if not ok.any():
        raise ValueError(f"--from-trace {path}: no successful request")
    start, ttft, latency, prompt, output = (a[ok] for a in (start, ttft, latency, prompt, output))
    order = np.argsort(start, kind="stable")
    start, ttft, latency, prompt, output = (
        a[order] for a in (start, ttft, latency, prompt, output)
    )
    arrival = start - start[0]
    delay = (frontend or FrontendModel()).delay_s(prompt)
    ids = [f"bench-{i}" for i in range(arrival.size)]
    measured = Measured(
        ids, arrival, arrival + np.maximum(ttft - delay, 0.0), arrival + latency - delay, output
    )
    records = [
        {"request_id": rid, "arrival_s": float(a), "prompt_tokens": int(p), "output_tokens": int(o)}
        for rid, a, p, o in zip(ids, arrival, prompt, output)
    ]
    return measured, records


def write_trace(records: list[dict[str, Any]], path: Path) -> Path:
    """The records as a kvsim JSONL trace at ``path``."""
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path
