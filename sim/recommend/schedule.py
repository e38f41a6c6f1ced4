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
    search = _Search(list(jobs_in_order), score, top, work, jobs, on_done)
    pool = None
    if jobs > 1 and sum(1 for j in search.order if j.cached is None) > 1:
        pool = ProcessPoolExecutor(
            max_workers=jobs, initializer=worker_init, initargs=(os.getpid(),)
        )
    try:
        while True:
            search.decide_in_turn()
            if search.cursor >= len(search.order):
                break
            if pool is None:
                search.run_inline()
            else:
                search.run_ahead(pool)
    except KeyboardInterrupt:
        if pool is not None:
            _terminate_workers(pool)
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return search.outcome()


class _Search:
    """One branch and bound's state: the results in (``done``), the errors, what is
    decided (in candidate order, up to ``cursor``) and what runs in the pool."""

    def __init__(
        self,
        order: list[Job],
        score: Callable[[Result], float],
        top: int,
        work: Callable[[dict[str, Any]], Result],
        jobs: int,
        on_done: Callable[[Job, Result | None, str], None] | None,
    ) -> None:
        """Nothing decided yet; the cached results count as done."""
        self.order = order
        self.score = score
        self.top = top
        self.work = work
        self.jobs = jobs
        self.on_done = on_done
        self.done: dict[str, Result] = {j.key: j.cached for j in order if j.cached is not None}
        self.errors: dict[str, BaseException] = {}
        self.decided: dict[str, str] = {}
        self.pruned: list[str] = []
        self.running: dict[Future, str] = {}
        self.index = {j.key: i for i, j in enumerate(order)}
        self.cursor = 0

    def bar_before(self, i: int, known_only: bool) -> float:
        """The ``top``-th best score of the candidates before the ``i``-th: of every
        result in (``known_only``), else of the ones decided kept."""
        order, done = self.order, self.done
        scores = [self.score(done[j.key]) for j in order[:i] if j.key in done]
        if not known_only:
            scores = [
                self.score(done[j.key]) for j in order[:i] if self.decided.get(j.key) == "kept"
            ]
        return nth_best(scores, self.top)

    def started(self, key: str) -> bool:
        """Whether the candidate ``key`` is done, failed or running."""
        return key in self.done or key in self.errors or key in self.running.values()

    def decide_in_turn(self) -> None:
        """Decide, in order, every candidate whose turn has come: pruned, or kept (or
        an error) once its result is in; stop at the first still to be searched."""
        while self.cursor < len(self.order):
            job = self.order[self.cursor]
            if job.lower > self.bar_before(self.cursor, known_only=False):
                self.decided[job.key] = "pruned"
                self.pruned.append(job.key)
                if self.on_done:
                    self.on_done(job, None, "pruned")
            elif job.key in self.done or job.key in self.errors:
                self.decided[job.key] = "kept" if job.key in self.done else "error"
                if self.on_done:
                    status = "cached" if job.cached is not None else "searched"
                    self.on_done(job, self.done.get(job.key), status)
            else:
                break
            self.cursor += 1

    def run_inline(self) -> None:
        """Search the candidate whose turn it is, in this process."""
        job = self.order[self.cursor]
        try:
            self.done[job.key] = self.work(job.payload)
        except Exception as e:  # an internal error in one candidate
            self.errors[job.key] = e

    def run_ahead(self, pool: ProcessPoolExecutor) -> None:
        """Start what may still be needed, ahead of its turn, up to ``jobs`` at once;
        then wait for one to finish and take in every finished result."""
        for job in self.order[self.cursor :]:
            if len(self.running) >= self.jobs:
                break
            if self.started(job.key):
                continue
            if job.lower > self.bar_before(self.index[job.key], known_only=True):
                continue
            self.running[pool.submit(run_in_worker, self.work, job.payload)] = job.key
        if not self.running:
            return
        finished, _ = wait(list(self.running), return_when=FIRST_COMPLETED)
        for fut in sorted(finished, key=lambda f: self.index[self.running[f]]):
            key = self.running.pop(fut)
            try:
                self.done[key] = fut.result()
            except Exception as e:
                self.errors[key] = e

    def outcome(self) -> Outcome:
        """What was decided: the kept results, the pruned keys, the errors."""
        results = {k: self.done[k] for k, v in self.decided.items() if v == "kept"}
        return Outcome(results=results, pruned=self.pruned, errors=self.errors)


def _terminate_workers(pool: ProcessPoolExecutor) -> None:
    """Stop the pool's live worker processes at once (on an interrupt)."""
    for process in list(getattr(pool, "_processes", {}).values()):
        if process.is_alive():
            process.terminate()


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
        _terminate_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
