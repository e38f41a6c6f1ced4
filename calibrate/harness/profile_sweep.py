"""The profiling sweep: time decode batches, prefill chunks and random mixed steps.

Grid (log-spaced): decode-only steps of ``batch`` requests at ``context`` cached tokens
each; prefill-only steps of one ``chunk`` on ``cached`` tokens; and random mixed steps
(some decodes plus one or two prefill chunks). Timing: on CUDA, CUDA events around
each step, median of ``repeats`` after ``warmup`` runs; on a CPU, ``time.process_time``
(one thread: call ``torch.set_num_threads(1)``), minimum of the repeats (the least
disturbed run; process time still counts cache misses from other load). Times are
seconds. Rows keep the per-request token lists so features can be recomputed.
"""

from __future__ import annotations

import csv
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

CSV_FIELDS = ("regime", "num_requests", "num_tokens", "new_tokens", "context_tokens", "time_s")


@dataclass(frozen=True)
class SweepStep:
    """One step to time: per-request new and cached tokens."""

    regime: str
    new_tokens: tuple[int, ...]
    context_tokens: tuple[int, ...]


@dataclass(frozen=True)
class SweepGrid:
    """Sweep limits (tokens / requests) and the number of random mixed steps."""

    max_batch: int = 256
    max_context: int = 16384
    max_chunk: int = 8192
    num_mixed: int = 50
    points: int = 6  # log-spaced values per axis
    max_cached_tokens: int = 1 << 22  # decode points with batch x context above are skipped


def log_points(lo: int, hi: int, n: int) -> list[int]:
    """``n`` roughly log-spaced distinct integers from ``lo`` to ``hi``."""
    vals = np.unique(np.round(np.geomspace(lo, hi, n)).astype(int))
    return [int(v) for v in vals]


def plan_sweep(grid: SweepGrid, seed: int = 0) -> list[SweepStep]:
    """The steps of the sweep, in a shuffled order (so slow drift spreads evenly)."""
    rng = np.random.default_rng(seed)
    steps = []
    for b in log_points(1, grid.max_batch, grid.points):
        for c in log_points(16, grid.max_context, grid.points):
            if b * c > grid.max_cached_tokens:
                continue
            steps.append(SweepStep("decode", (1,) * b, (c,) * b))
    for q in log_points(16, grid.max_chunk, grid.points):
        for c in [0, *log_points(64, grid.max_context, grid.points - 1)]:
            steps.append(SweepStep("prefill", (q,), (c,)))
    for _ in range(grid.num_mixed):
        n_dec = int(rng.integers(1, max(2, grid.max_batch // 2)))
        n_pre = int(rng.integers(1, 3))
        dec_ctx = rng.integers(16, grid.max_context, n_dec)
        chunks = rng.integers(16, max(17, grid.max_chunk // n_pre), n_pre)
        cached = rng.integers(0, grid.max_context // 2, n_pre)
        steps.append(
            SweepStep(
                "mixed",
                tuple(int(x) for x in chunks) + (1,) * n_dec,
                tuple(int(x) for x in cached) + tuple(int(x) for x in dec_ctx),
            )
        )
    order = rng.permutation(len(steps))
    return [steps[i] for i in order]


def blocks_needed(steps: Iterable[SweepStep], block_size: int) -> int:
    """KV blocks the largest step needs (the pool size to allocate)."""
    return max(
        sum(-(-(n + c) // block_size) for n, c in zip(s.new_tokens, s.context_tokens, strict=True))
        for s in steps
    )


def time_step(run: Callable[[], object], device_type: str, repeats: int, warmup: int) -> float:
    """Seconds one call of ``run`` takes (see the module docstring)."""
    for _ in range(warmup):
        run()
    if device_type == "cuda":
        import torch

        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return float(statistics.median(times))
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        run()
        times.append(time.process_time() - t0)
    return float(min(times))


def run_sweep(
    runner: object,
    steps: list[SweepStep],
    repeats: int = 5,
    warmup: int = 1,
    seed: int = 0,
    on_step: Callable[[int], None] | None = None,
) -> list[dict[str, object]]:
    """Time every step on ``runner`` (a ``TorchRunner`` with its KV pool allocated);
    one row per step (``CSV_FIELDS``)."""
    rng = np.random.default_rng(seed)
    device_type = runner.device.type  # type: ignore[attr-defined]
    rows = []
    for i, step in enumerate(steps):
        inputs = runner.make_step(list(step.new_tokens), list(step.context_tokens), rng)  # type: ignore[attr-defined]
        seconds = time_step(partial(runner.run_step, inputs), device_type, repeats, warmup)  # type: ignore[attr-defined]
        rows.append(
            {
                "regime": step.regime,
                "num_requests": len(step.new_tokens),
                "num_tokens": sum(step.new_tokens),
                "new_tokens": ";".join(map(str, step.new_tokens)),
                "context_tokens": ";".join(map(str, step.context_tokens)),
                "time_s": seconds,
            }
        )
        if on_step is not None:
            on_step(i + 1)
    return rows


def write_csv(rows: list[dict[str, object]], path: str | Path) -> None:
    """The raw measurements as CSV (``CSV_FIELDS``)."""
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
