"""Which trace format a file holds, from its suffix and first record or header."""

from __future__ import annotations

from pathlib import Path

from workloads.errors import WorkloadError
from workloads.traces.csv_traces import (
    AZURE_COLUMNS,
    BURSTGPT_COLUMNS,
    read_azure,
    read_burstgpt,
    read_header,
)
from workloads.traces.jsonl import iter_json_lines
from workloads.traces.kvsim_jsonl import read_kvsim
from workloads.traces.llmservingsim import read_llmservingsim
from workloads.traces.mooncake import read_mooncake
from workloads.traces.table import TraceTable

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
CSV_SUFFIXES = (".csv",)
TRACE_SUFFIXES = JSONL_SUFFIXES + CSV_SUFFIXES

_READERS = {
    "kvsim": read_kvsim,
    "llmservingsim": read_llmservingsim,
    "mooncake": read_mooncake,
    "azure": read_azure,
    "burstgpt": read_burstgpt,
}


def detect_format(path: Path, file: str) -> str:
    """``kvsim``, ``llmservingsim``, ``mooncake``, ``azure`` or ``burstgpt``.

    JSONL: ``input_toks`` in the first record means an LLMServingSim request log,
    ``arrival_s`` (or ``request_id``) kvsim, ``timestamp`` or ``input_length`` Mooncake.
    CSV: a ``TIMESTAMP`` or ``ContextTokens`` column means Azure, ``Timestamp`` or
    ``Request tokens`` means BurstGPT (the reader then reports any other missing column).
    """
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        for number, obj in iter_json_lines(path, file):
            if "input_toks" in obj:
                return "llmservingsim"
            if "arrival_s" in obj or "request_id" in obj:
                return "kvsim"
            if "timestamp" in obj or "input_length" in obj:
                return "mooncake"
            raise WorkloadError(
                file,
                f"line {number}",
                "unrecognised JSONL trace: expected kvsim fields (request_id, arrival_s, ...) "
                "or Mooncake fields (timestamp, input_length, output_length, hash_ids) or "
                "LLMServingSim fields (request_id, input_toks, output_toks, arrival_time)",
            )
        raise WorkloadError(file, "", "trace holds no requests")
    if suffix in CSV_SUFFIXES:
        header = read_header(path, file)
        if not header:
            raise WorkloadError(file, "", "trace holds no requests (no header)")
        if "TIMESTAMP" in header or "ContextTokens" in header:
            return "azure"
        if "Timestamp" in header or "Request tokens" in header:
            return "burstgpt"
        raise WorkloadError(
            file,
            "header",
            f"unrecognised CSV trace: expected Azure columns ({', '.join(AZURE_COLUMNS)}) "
            f"or BurstGPT columns ({', '.join(BURSTGPT_COLUMNS)}); found {', '.join(header)}",
        )
    raise WorkloadError(
        file, "", f"unknown trace suffix {suffix!r} (allowed: {', '.join(TRACE_SUFFIXES)})"
    )


def read_trace(path: Path, file: str | None = None) -> TraceTable:
    """Read a trace of any supported format; errors name ``file`` (default: the path)."""
    file = file or str(path)
    return _READERS[detect_format(path, file)](path, file)
