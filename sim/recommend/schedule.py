"""Branch and bound over the candidates: search them best-bound first, skip the ones
whose bound cannot reach the top N, in parallel processes.

Candidates come sorted by their optimistic score (the score they would have at their
analytic rate bound, :mod:`sim.recommend.bounds`; lower is better), and a searched
candidate's score is never below its optimistic one. A candidate is **pruned** when
its optimistic score is above the N-th best score of the candidates before it: it
cannot enter the top N. That is decided in candidate order, as a one-at-a-time
search would, so which candidates are pruned does not depend on the number of jobs or
on which finished first. Workers run ahead: a candidate is started while earlier ones
still run unless the results already in prune it (the N-th best only improves as
results come in, so such a candidate stays pruned); one started ahead that the
in-order decision then prunes keeps its cached result, but counts as pruned.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from sim.signals import run_in_worker, worker_init

Result = dict[str, Any]


@dataclass
class Job:
    """One candidate to search: ``lower`` its optimistic score, ``payload`` for
    ``work``, ``cached`` its result when already known."""

    key: str
    lower: float
    payload: dict[str, Any]
    cached: Result | None = None


@dataclass
class Outcome:
    """What branch and bound decided: ``results`` of searched candidates (by key),
    ``pruned`` keys in candidate order, ``errors`` internal errors by key."""

    results: dict[str, Result]
    pruned: list[str]
    errors: dict[str, BaseException]


def nth_best(scores: list[float], n: int) -> float:
    """The ``n``-th lowest finite score, ``inf`` with fewer than ``n``."""
    finite = sorted(s for s in scores if math.isfinite(s))
    return finite[n - 1] if len(finite) >= n else math.inf


def branch_and_bound(
    jobs_in_order: list[Job],
    score: Callable[[Result], float],
    top: int,
    work: Callable[[dict[str, Any]], Result],
    jobs: int = 1,
    on_done: Callable[[Job, Result | None, str], None] | None = None,
) -> Outcome:
    """Search ``jobs_in_order`` (sorted by ``lower``) with ``work`` in up to ``jobs``
    processes (one: inline); see the module docstring. ``on_done(job, result,
    status)`` is called as each candidate is decided (``searched``, ``cached`` or
    ``pruned``)."""
    order = list(jobs_in_order)
    done: dict[str, Result] = {j.key: j.cached for j in order if j.cached is not None}
    errors: dict[str, BaseException] = {}
    decided: dict[str, str] = {}
    pruned: list[str] = []
    pool = None
    if jobs > 1 and sum(1 for j in order if j.cached is None) > 1:
        pool = ProcessPoolExecutor(
            max_workers=jobs, initializer=worker_init, initargs=(os.getpid(),)
        )
    running: dict[Future, str] = {}
    index = {j.key: i for i, j in enumerate(order)}

    def bar_before(i: int, known_only: bool) -> float:
        scores = [score(done[j.key]) for j in order[:i] if j.key in done]
        if not known_only:
            scores = [score(done[j.key]) for j in order[:i] if decided.get(j.key) == "kept"]
        return nth_best(scores, top)

    def started(key: str) -> bool:
        return key in done or key in errors or key in running.values()

    try:
        cursor = 0
        while cursor < len(order):
            # Decide, in order, every candidate whose turn has come.
            while cursor < len(order):
                job = order[cursor]
                if job.lower > bar_before(cursor, known_only=False):
                    decided[job.key] = "pruned"
                    pruned.append(job.key)
                    if on_done:
                        on_done(job, None, "pruned")
                elif job.key in done or job.key in errors:
                    decided[job.key] = "kept" if job.key in done else "error"
                    if on_done:
                        status = "cached" if job.cached is not None else "searched"
                        on_done(job, done.get(job.key), status)
                else:
                    break
                cursor += 1
            if cursor >= len(order):
                break
            if pool is None:
                job = order[cursor]
                try:
                    done[job.key] = work(job.payload)
                except Exception as e:  # an internal error in one candidate
                    errors[job.key] = e
                continue
            # Start what may still be needed, ahead of its turn.
            for job in order[cursor:]:
                if len(running) >= jobs:
                    break
                if started(job.key):
                    continue
                if job.lower > bar_before(index[job.key], known_only=True):
                    continue
                running[pool.submit(run_in_worker, work, job.payload)] = job.key
            if not running:
                continue
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for fut in sorted(finished, key=lambda f: index[running[f]]):
                key = running.pop(fut)
                try:
                    done[key] = fut.result()
                except Exception as e:
                    errors[key] = e
    except KeyboardInterrupt:
        if pool is not None:
            for process in list(getattr(pool, "_processes", {}).values()):
                if process.is_alive():
                    process.terminate()
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    results = {k: done[k] for k, v in decided.items() if v == "kept"}
    return Outcome(results=results, pruned=pruned, errors=errors)


def map_parallel(
    work: Callable[[dict[str, Any]], Result], payloads: list[dict[str, Any]], jobs: int
) -> list[Result]:
    """``work`` on each payload, in up to ``jobs`` processes (one: inline); results in
    payload order. An internal error in one propagates once the others are done."""
    if jobs <= 1 or len(payloads) <= 1:
        return [work(p) for p in payloads]
    pool = ProcessPoolExecutor(
        max_workers=min(jobs, len(payloads)), initializer=worker_init, initargs=(os.getpid(),)
    )
    try:
        futures = [pool.submit(run_in_worker, work, p) for p in payloads]
        wait(futures)
        return [f.result() for f in futures]
    except KeyboardInterrupt:
        for process in list(getattr(pool, "_processes", {}).values()):
            if process.is_alive():
                process.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
