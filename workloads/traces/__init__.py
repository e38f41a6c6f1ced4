"""Trace readers: kvsim JSONL, Mooncake JSONL, Azure LLM inference CSV, BurstGPT CSV.

Each reader returns a ``TraceTable``; ``read_trace`` picks the reader from the file's
suffix and its first record (JSONL fields) or header (CSV columns).
"""

from workloads.traces.detect import detect_format, read_trace
from workloads.traces.table import TraceTable

__all__ = ["TraceTable", "detect_format", "read_trace"]
