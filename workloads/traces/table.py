"""The in-memory form of a trace: one column per field, numbers in numpy arrays.

Arrivals must be non-decreasing: readers reject a trace whose arrivals go back in time
(naming the line or row) rather than silently reordering it; sort the file first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workloads.errors import WorkloadError


@dataclass(slots=True)
class TraceTable:
    """A trace, row ``i`` being the ``i``-th request in arrival order.

    Attributes:
        format: ``kvsim``, ``llmservingsim``, ``mooncake``, ``azure`` or ``burstgpt``.
        arrival_s: arrival times in seconds (float64).
        prompt_tokens: prompt lengths in tokens (int64).
        output_tokens: output lengths in tokens (int64).
        request_ids: per-row ids, or None (then ``req-<row>``).
        token_ids: per-row explicit prompt token ids (or None for a row), or None (no row
            has its own).
        hash_ids: per-row hash ids of prompt blocks (or None for a row), or None (no row
            has any).
        hash_block_size: tokens per hash block, per row, or None.
        priority, lora_id, cache_salt, session_id: optional per-row columns.
        skipped_rows: rows left out on purpose (see the reader), for the resolved config.
        line_numbers: the file line of each row (for messages), or None.
    """

    format: str
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    request_ids: list[str] | None = None
    token_ids: list[list[int] | None] | None = None
    hash_ids: list[list[int] | None] | None = None
    hash_block_size: list[int] | None = None
    priority: list[int] | None = None
    lora_id: list[int | None] | None = None
    cache_salt: list[str | None] | None = None
    session_id: list[str | None] | None = None
    skipped_rows: int = 0
    line_numbers: list[int] | None = None
    extra: dict[str, object] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.arrival_s)


def check_arrivals(file: str, arrivals: list[float], where: list[str], field_name: str) -> None:
    """Reject negative or decreasing arrival times; ``where[i]`` names row ``i`` (``line 3``)."""
    if arrivals and arrivals[0] < 0:
        raise WorkloadError(file, f"{where[0]}: {field_name}", f"must be >= 0 (got {arrivals[0]})")
    for index in range(1, len(arrivals)):
        value, previous = arrivals[index], arrivals[index - 1]
        if value < previous:
            raise WorkloadError(
                file,
                f"{where[index]}: {field_name}",
                f"{value} is earlier than the previous request's {previous}; arrivals must be "
                "non-decreasing (sort the trace by arrival time)",
            )


def require_nonempty(file: str, rows: int) -> None:
    """An empty trace is an error."""
    if rows == 0:
        raise WorkloadError(file, "", "trace holds no requests")
