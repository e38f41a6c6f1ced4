"""Request logs of real vLLM runs in LLMServingSim's format
(github.com/casys-kaist/LLMServingSim, ``bench/examples/<hardware>/<model>/requests.jsonl``).

One JSON object per line with ``request_id``, ``input_toks``, ``output_toks`` and
``arrival_time`` (the client's wall clock, Unix seconds), plus the engine's timestamps
(``queued_ts``, ``scheduled_ts``, ``first_token_ts``, ``last_token_ts``; read by
``kvsim compare``, ignored here). Told apart from kvsim's JSONL by ``input_toks`` in the
first line. Arrival = ``arrival_time`` - the first line's: the times the client sent
the requests (the engine saw them later, after the API server). Prompt token ids are
drawn from the run's seed (the log has none; its ShareGPT prompts share almost no
prefixes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from workloads.traces.jsonl import read_records
from workloads.traces.table import TraceTable, check_arrivals


class LLMServingSimLine(BaseModel):
    """One line of an LLMServingSim request log (the fields a replay needs)."""

    model_config = ConfigDict(defer_build=True, extra="ignore", frozen=True)

    request_id: StrictStr = Field(min_length=1)
    input_toks: StrictInt = Field(ge=1)
    output_toks: StrictInt = Field(ge=1)
    arrival_time: float = Field(allow_inf_nan=False)


def read_llmservingsim(path: Path, file: str) -> TraceTable:
    """Read an LLMServingSim ``requests.jsonl`` (see the module docstring)."""
    rows, lines, numbers = read_records(path, file, LLMServingSimLine)
    stamps = [r["arrival_time"] - rows[0]["arrival_time"] for r in rows]
    check_arrivals(file, stamps, lines, "arrival_time")
    return TraceTable(
        format="llmservingsim",
        arrival_s=np.asarray(stamps, dtype=np.float64),
        prompt_tokens=np.asarray([r["input_toks"] for r in rows], dtype=np.int64),
        output_tokens=np.asarray([r["output_toks"] for r in rows], dtype=np.int64),
        request_ids=[r["request_id"] for r in rows],
        line_numbers=numbers,
    )
