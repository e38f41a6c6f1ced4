"""kvsim's own JSONL trace (INTERFACES.md, "Trace format").

One request per line: ``request_id`` (string), ``arrival_s`` (seconds), either
``prompt_token_ids`` or ``prompt_tokens`` (with optional Mooncake-style ``hash_ids`` and
``hash_block_size``, default 512), ``output_tokens``, and optional ``priority``,
``lora_id``, ``cache_salt``, ``session_id``. Unknown fields are rejected; arrivals are
replayed exactly and must be non-decreasing; request ids must be unique.
"""

from __future__ import annotations

import math
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

from workloads.traces.jsonl import Row, read_records
from workloads.traces.table import TraceTable, check_arrivals

MOONCAKE_BLOCK = 512
"""Tokens per hash block in Mooncake traces (the default ``hash_block_size``)."""


class KvsimLine(BaseModel):
    """One line of a kvsim trace."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    request_id: StrictStr = Field(min_length=1)
    arrival_s: float = Field(allow_inf_nan=False)
    prompt_token_ids: list[StrictInt] | None = Field(default=None, min_length=1)
    prompt_tokens: StrictInt | None = Field(default=None, ge=1)
    hash_ids: list[StrictInt] | None = Field(default=None, min_length=1)
    hash_block_size: StrictInt = Field(default=MOONCAKE_BLOCK, ge=1)
    output_tokens: StrictInt = Field(ge=1)
    priority: StrictInt = 0
    lora_id: StrictInt | None = None
    cache_salt: StrictStr | None = None
    session_id: StrictStr | None = None

    @model_validator(mode="after")
    def _prompt(self) -> KvsimLine:
        check_prompt(self.prompt_token_ids, self.prompt_tokens, self.hash_ids, self.hash_block_size)
        return self


def check_prompt(
    token_ids: list[int] | None, tokens: int | None, hash_ids: list[int] | None, block_size: int
) -> None:
    """A line's prompt fields together (``ValueError`` when they do not go together):
    exactly one of ``prompt_token_ids`` and ``prompt_tokens``, ids >= 0, ``hash_ids``
    only with ``prompt_tokens`` and covering them."""
    if (token_ids is None) == (tokens is None):
        raise ValueError("give exactly one of prompt_token_ids and prompt_tokens")
    if token_ids is not None:
        if hash_ids is not None:
            raise ValueError("hash_ids go with prompt_tokens, not prompt_token_ids")
        if min(token_ids) < 0:
            raise ValueError("prompt_token_ids must be >= 0")
    if hash_ids is not None:
        check_hash_cover(hash_ids, block_size, tokens or 0)


def _check_row(row: Row) -> Row:
    """:class:`KvsimLine`'s cross-field check on a row of its fields."""
    check_prompt(
        row["prompt_token_ids"], row["prompt_tokens"], row["hash_ids"], row["hash_block_size"]
    )
    return row


def check_hash_cover(hash_ids: list[int], block_size: int, num_tokens: int) -> None:
    """``hash_ids`` must be non-negative and cover ``num_tokens`` exactly (last block partial)."""
    if min(hash_ids) < 0:
        raise ValueError("hash_ids must be >= 0")
    need = math.ceil(num_tokens / block_size)
    if len(hash_ids) != need:
        raise ValueError(
            f"{len(hash_ids)} hash_ids of {block_size} tokens do not cover {num_tokens} "
            f"prompt tokens (need {need})"
        )


def read_kvsim(path: Path, file: str) -> TraceTable:
    """Read a kvsim JSONL trace (see the module docstring)."""
    rows, lines, numbers = read_records(path, file, KvsimLine, _check_row)

    def column(name: str) -> list[Any]:
        return list(map(itemgetter(name), rows))

    arrivals = column("arrival_s")
    check_arrivals(file, arrivals, lines, "arrival_s")
    token_ids = column("prompt_token_ids")
    hash_ids = column("hash_ids")
    return TraceTable(
        format="kvsim",
        arrival_s=np.asarray(arrivals, dtype=np.float64),
        prompt_tokens=np.asarray(
            [
                len(r["prompt_token_ids"]) if r["prompt_token_ids"] else r["prompt_tokens"]
                for r in rows
            ],
            dtype=np.int64,
        ),
        output_tokens=np.asarray(column("output_tokens"), dtype=np.int64),
        request_ids=column("request_id"),
        token_ids=token_ids if any(t is not None for t in token_ids) else None,
        hash_ids=hash_ids if any(h is not None for h in hash_ids) else None,
        hash_block_size=column("hash_block_size"),
        priority=column("priority"),
        lora_id=column("lora_id"),
        cache_salt=column("cache_salt"),
        session_id=column("session_id"),
        line_numbers=numbers,
    )
