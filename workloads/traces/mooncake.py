"""Mooncake JSONL traces (github.com/kvcache-ai/Mooncake, FAST'25 traces).

Each line: ``timestamp`` (milliseconds), ``input_length`` and ``output_length``
(tokens), ``hash_ids`` (one id per 512-token block of the prompt, the last block
partial). Other fields are ignored. Arrival = (timestamp - first timestamp) / 1000 s.
Prompt token ids are re-expanded from the hash ids so that equal hash ids give equal
tokens (``workloads.tokens.HashBlockTokens``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from workloads.traces.jsonl import iter_json_lines, validate_record
from workloads.traces.kvsim_jsonl import MOONCAKE_BLOCK, check_hash_cover
from workloads.traces.table import TraceTable, check_arrivals, require_nonempty


class MooncakeLine(BaseModel):
    """One line of a Mooncake trace."""

    model_config = ConfigDict(defer_build=True, extra="ignore", frozen=True)

    timestamp: float = Field(allow_inf_nan=False)
    input_length: StrictInt = Field(ge=1)
    output_length: StrictInt = Field(ge=1)
    hash_ids: list[StrictInt] = Field(min_length=1)

    @model_validator(mode="after")
    def _cover(self) -> MooncakeLine:
        check_hash_cover(self.hash_ids, MOONCAKE_BLOCK, self.input_length)
        return self


def read_mooncake(path: Path, file: str) -> TraceTable:
    """Read a Mooncake JSONL trace (see the module docstring)."""
    rows: list[MooncakeLine] = []
    lines: list[str] = []
    numbers: list[int] = []
    for number, obj in iter_json_lines(path, file):
        rows.append(validate_record(MooncakeLine, obj, file, number))
        lines.append(f"line {number}")
        numbers.append(number)
    require_nonempty(file, len(rows))
    stamps = [r.timestamp for r in rows]
    check_arrivals(file, stamps, lines, "timestamp")
    arrivals = (np.asarray(stamps, dtype=np.float64) - stamps[0]) / 1000.0
    return TraceTable(
        format="mooncake",
        arrival_s=arrivals,
        prompt_tokens=np.asarray([r.input_length for r in rows], dtype=np.int64),
        output_tokens=np.asarray([r.output_length for r in rows], dtype=np.int64),
        hash_ids=[r.hash_ids for r in rows],
        hash_block_size=[MOONCAKE_BLOCK] * len(rows),
        line_numbers=numbers,
    )
