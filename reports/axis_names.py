"""Readable names and units of swept and searched parameters.

A sweep axis is a dotted path (``workload.arrival.rate``) and a plan searches a
parameter (``rate``, ``num_gpu_blocks``); reports label plots and points with a short
name and the unit instead (``arrival rate (req/s)``, ``rate=8``).
"""

from __future__ import annotations

from typing import Any

# path or plan parameter -> (label, unit, short name in point names)
_KNOWN: dict[str, tuple[str, str, str]] = {
    "workload.arrival.rate": ("arrival rate", "req/s", "rate"),
    "rate": ("arrival rate", "req/s", "rate"),
    "engine.num_gpu_blocks_override": ("KV blocks per replica", "blocks", "blocks"),
    "num_gpu_blocks": ("KV blocks per replica", "blocks", "blocks"),
    "engine.gpu_memory_utilization": ("gpu_memory_utilization", "fraction of memory", "gpu_mem"),
    "gpu_memory_utilization": ("gpu_memory_utilization", "fraction of memory", "gpu_mem"),
    "engine.max_num_seqs": ("max_num_seqs", "requests", "max_seqs"),
    "max_num_seqs": ("max_num_seqs", "requests", "max_seqs"),
    "engine.max_num_batched_tokens": ("max_num_batched_tokens", "tokens", "batch_tokens"),
    "engine.max_model_len": ("max_model_len", "tokens", "max_len"),
    "engine.block_size": ("block size", "tokens", "block_size"),
    "engine.tensor_parallel_size": ("tensor parallel size", "GPUs", "tp"),
    "engine.long_prefill_token_threshold": ("long prefill threshold", "tokens", "long_prefill"),
    "num_replicas": ("replicas", "", "replicas"),
    "workload.num_requests": ("requests per run", "", "requests"),
    "workload.duration_s": ("run duration", "s", "duration"),
}


def _last(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def axis_label(path: str) -> str:
    """``arrival rate (req/s)`` for ``workload.arrival.rate``; an unknown path: its last
    component, with ``(s)`` when it ends in ``_s``."""
    if path in _KNOWN:
        label, unit, _ = _KNOWN[path]
        return f"{label} ({unit})" if unit else label
    if path == "point":
        return "point"
    last = _last(path)
    return f"{last} (s)" if last.endswith("_s") else last


def axis_unit(path: str) -> str:
    """The unit of a parameter (``req/s``), or ""."""
    if path in _KNOWN:
        return _KNOWN[path][1]
    return "s" if path.endswith("_s") else ""


def short_name(path: str, others: list[str] | None = None) -> str:
    """The name of ``path`` in a point name (``rate``); the last two components when
    another path in ``others`` has the same short name."""
    name = _KNOWN[path][2] if path in _KNOWN else _last(path)
    clash = [o for o in others or [] if o != path and short_name(o) == name]
    if clash and "." in path:
        return ".".join(path.split(".")[-2:])
    return name


def value_text(value: Any) -> str:
    """An axis value as text: ``8`` for 8.0, ``0.9`` as is, strings as they are, a
    null (NaN once read back from sweep.csv) as ``none``."""
    if value is None or (isinstance(value, float) and value != value):
        return "none"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def point_name(values: dict[str, Any], seed: Any = None) -> str:
    """``rate=8, router=least_kv, seed 0`` from a point's axis values (and seed)."""
    paths = list(values)
    parts = [f"{short_name(p, paths)}={value_text(v)}" for p, v in values.items()]
    if seed is not None and seed == seed and seed != "":  # NaN: no seed
        parts.append(f"seed {value_text(seed)}")
    return ", ".join(parts) or "base"
