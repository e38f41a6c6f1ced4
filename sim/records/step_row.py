"""One engine step's outcome, typed: a ``steps.csv`` row (:class:`StepRow`), and the
bulk form of a stretch of decode-only steps (:class:`DecodeRows`).

:data:`STEP_COLUMNS` is ``steps.csv``'s header (docs/outputs.md describes the columns);
:class:`StepRow` takes and holds exactly those fields, in that order
(:meth:`StepRow.values`), and the writers (:mod:`sim.records.step_rows`,
:mod:`sim.records.step_thin`, :mod:`sim.records.step_parquet`) find columns by name
in it. Units: seconds (``*_s``), tokens (``*_tokens``, ``prefix_*``), KV blocks
(``*_blocks``), requests (``num_running``, ``num_waiting``, ``num_preempted``);
``kv_usage`` is a fraction in [0, 1] (:meth:`kvcore.block_pool.BlockPool.usage_at`).

Plain classes with an explicit ``__init__`` (not dataclasses): compiled, they are built
without interpreted code, once per step.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any

from kvcore.block_pool import BlockPool

STEP_COLUMNS: tuple[str, ...] = (
    "replica",
    "step",
    "start_s",
    "duration_s",
    "num_running",
    "num_waiting",
    "num_prefill_tokens",
    "num_decode_tokens",
    "num_preempted",
    "kv_usage",
    "num_free_blocks",
    "num_cached_blocks",
    "prefix_queries",
    "prefix_hits",
    "num_cached_free_blocks",
)
"""``steps.csv``'s columns: INTERFACES.md's, then kvsim's extension
``num_cached_free_blocks``; :class:`StepRow`'s fields, in order."""
FLOAT_COLUMNS: tuple[str, ...] = ("start_s", "duration_s", "kv_usage")
"""The float columns (9 significant digits in CSV, float64 in Parquet); the rest are
integers."""
DECODE = "d"
"""The tag of a :class:`DecodeRows` head (:meth:`DecodeRows.head`)."""


class StepRow:
    """One step of one replica, as ``steps.csv`` holds it (floats unformatted). A
    value: nothing changes it after it is built."""

    __slots__ = STEP_COLUMNS

    def __init__(
        self,
        replica: int,
        step: int,
        start_s: float,
        duration_s: float,
        num_running: int,
        num_waiting: int,
        num_prefill_tokens: int,
        num_decode_tokens: int,
        num_preempted: int,
        kv_usage: float,
        num_free_blocks: int,
        num_cached_blocks: int,
        prefix_queries: int,
        prefix_hits: int,
        num_cached_free_blocks: int,
    ) -> None:
        self.replica = replica
        """The replica that ran the step (0-based)."""
        self.step = step
        """The step's number on its replica, from 0."""
        self.start_s = start_s
        self.duration_s = duration_s
        self.num_running = num_running
        """Requests running at the end of the step."""
        self.num_waiting = num_waiting
        """Requests waiting at the end of the step."""
        self.num_prefill_tokens = num_prefill_tokens
        self.num_decode_tokens = num_decode_tokens
        self.num_preempted = num_preempted
        """Requests preempted in the step."""
        self.kv_usage = kv_usage
        """Fraction of usable KV blocks in use at the end of the step."""
        self.num_free_blocks = num_free_blocks
        self.num_cached_blocks = num_cached_blocks
        """Blocks holding a cached prefix."""
        self.prefix_queries = prefix_queries
        """Prompt tokens looked up in the prefix cache (preempted requests' included)."""
        self.prefix_hits = prefix_hits
        """Of those, tokens found."""
        self.num_cached_free_blocks = num_cached_free_blocks
        """Cached blocks no request holds (reusable, evicted on demand)."""

    def values(self) -> tuple[Any, ...]:
        """The fields in :data:`STEP_COLUMNS` order (the form rows travel in)."""
        return (
            self.replica,
            self.step,
            self.start_s,
            self.duration_s,
            self.num_running,
            self.num_waiting,
            self.num_prefill_tokens,
            self.num_decode_tokens,
            self.num_preempted,
            self.kv_usage,
            self.num_free_blocks,
            self.num_cached_blocks,
            self.prefix_queries,
            self.prefix_hits,
            self.num_cached_free_blocks,
        )

    def __repr__(self) -> str:
        return f"StepRow{self.values()!r}"


class DecodeRows:
    """The rows of ``k = len(durations)`` consecutive decode-only steps of one replica
    (a fast-forward stretch, or a part of one), in bulk.

    Step ``step0 + j`` starts at ``start0_s`` plus the durations before it (summed in
    order), runs ``batch`` requests that each decode one token, with nothing waiting,
    prefilled, preempted or looked up in the prefix cache; after the last step
    ``last_running`` requests run (fewer than ``batch`` when requests finish in it),
    after every other ``batch``. The per-step lists (seconds; block counts after each
    step) are ``k`` long; ``num_usable_blocks``: the replica's KV blocks besides the
    null block. Expanded, the rows are those :meth:`row` builds."""

    __slots__ = (
        "batch",
        "durations",
        "last_running",
        "num_cached_blocks",
        "num_cached_free_blocks",
        "num_free_blocks",
        "num_usable_blocks",
        "replica",
        "start0_s",
        "step0",
    )

    def __init__(
        self,
        replica: int,
        step0: int,
        start0_s: float,
        batch: int,
        last_running: int,
        num_usable_blocks: int,
        durations: list[float],
        num_free_blocks: list[int],
        num_cached_blocks: list[int],
        num_cached_free_blocks: list[int],
    ) -> None:
        self.replica = replica
        self.step0 = step0
        self.start0_s = start0_s
        self.batch = batch
        self.last_running = last_running
        self.num_usable_blocks = num_usable_blocks
        self.durations = durations
        self.num_free_blocks = num_free_blocks
        self.num_cached_blocks = num_cached_blocks
        self.num_cached_free_blocks = num_cached_free_blocks

    def starts(self) -> list[float]:
        """Each step's start (s): ``start0_s``, then each previous start plus its
        duration."""
        return list(accumulate(self.durations[:-1], initial=self.start0_s))

    def kv_usage(self) -> list[float]:
        """Each step's KV usage."""
        usable = self.num_usable_blocks
        return [BlockPool.usage_at(f, usable) for f in self.num_free_blocks]

    def row(self, j: int, start_s: float) -> StepRow:
        """Step ``step0 + j``'s row; ``start_s``: its start (``starts()[j]``)."""
        free = self.num_free_blocks[j]
        return StepRow(
            replica=self.replica,
            step=self.step0 + j,
            start_s=start_s,
            duration_s=self.durations[j],
            num_running=self.batch if j < len(self.durations) - 1 else self.last_running,
            num_waiting=0,
            num_prefill_tokens=0,
            num_decode_tokens=self.batch,
            num_preempted=0,
            kv_usage=BlockPool.usage_at(free, self.num_usable_blocks),
            num_free_blocks=free,
            num_cached_blocks=self.num_cached_blocks[j],
            prefix_queries=0,
            prefix_hits=0,
            num_cached_free_blocks=self.num_cached_free_blocks[j],
        )

    def columns(self) -> dict[str, list[Any]]:
        """The rows as column lists by name: those of :meth:`row`, in bulk."""
        k = len(self.durations)
        zeros = [0] * k
        return {
            "replica": [self.replica] * k,
            "step": list(range(self.step0, self.step0 + k)),
            "start_s": self.starts(),
            "duration_s": self.durations,
            "num_running": [self.batch] * (k - 1) + [self.last_running],
            "num_waiting": zeros,
            "num_prefill_tokens": zeros,
            "num_decode_tokens": [self.batch] * k,
            "num_preempted": zeros,
            "kv_usage": self.kv_usage(),
            "num_free_blocks": self.num_free_blocks,
            "num_cached_blocks": self.num_cached_blocks,
            "prefix_queries": zeros,
            "prefix_hits": zeros,
            "num_cached_free_blocks": self.num_cached_free_blocks,
        }

    def head(self) -> tuple[Any, ...]:
        """The stretch without its per-step lists, as chunks carry it (a plain tuple,
        tagged :data:`DECODE`; the lists travel as arrays): :meth:`from_head`'s input."""
        return (
            DECODE,
            self.replica,
            self.step0,
            self.start0_s,
            len(self.durations),
            self.batch,
            self.last_running,
            self.num_usable_blocks,
        )

    @staticmethod
    def from_head(
        head: tuple[Any, ...],
        at: int,
        durations: list[float],
        num_free_blocks: list[int],
        num_cached_blocks: list[int],
        num_cached_free_blocks: list[int],
    ) -> DecodeRows:
        """The stretch of a :meth:`head` whose per-step values are those from ``at``
        on of the lists (as many as it has steps)."""
        _, replica, step0, start0_s, k, batch, last_running, usable = head
        end = at + k
        return DecodeRows(
            replica,
            step0,
            start0_s,
            batch,
            last_running,
            usable,
            durations[at:end],
            num_free_blocks[at:end],
            num_cached_blocks[at:end],
            num_cached_free_blocks[at:end],
        )
