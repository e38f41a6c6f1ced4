"""Overriding a workload's rate and length: ``kvsim run --rate --num-requests --duration``.

The one place where a workload's ``arrival.rate``, ``num_requests`` and ``duration_s``
are replaced: ``kvsim run``'s flags, ``kvsim plan``'s probes (each probe sets the rate
and the run's length) and a sweep point that runs again longer all go through
:func:`override_spec`.

- ``rate`` (requests per second) replaces ``arrival.rate``; only a ``poisson``,
  ``gamma`` or ``constant`` arrival has one (with ``sessions``, sessions started per
  second).
- ``num_requests`` makes the workload send that many requests (every turn of a
  session is one) and drops its ``duration_s``.
- ``duration_s`` (seconds of simulated time) makes arrivals stop there: nothing is
  sent at or after that time, not even a session's next turn; requests already sent
  are served to the end, so the run's simulated time is longer. It drops the
  workload's ``num_requests``.

A trace takes ``num_requests`` (its first N requests) and ``duration_s`` (the requests
arriving before that time) but no ``rate``: its arrival times are its own.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from pydantic import ValidationError

from workloads.errors import WorkloadError, from_validation_error
from workloads.spec import WorkloadSpec
from workloads.traces.table import TraceTable

RATED_ARRIVALS = ("poisson", "gamma", "constant")
"""Arrival types with one ``rate`` that an override can set."""

FLAGS = {"rate": "--rate", "num_requests": "--num-requests", "duration_s": "--duration"}
"""The ``kvsim run`` flag of each override, named in error messages."""


@dataclass(frozen=True)
class WorkloadOverrides:
    """What replaces a workload's own values; ``None`` keeps the workload's."""

    rate: float | None = None
    """Requests (or sessions) per second, for ``arrival.rate``."""
    num_requests: int | None = None
    """Requests in all (replaces ``duration_s``)."""
    duration_s: float | None = None
    """Seconds of simulated time after which nothing is sent (replaces ``num_requests``)."""

    def given(self) -> dict[str, float | int]:
        """The overrides given, keyed by the workload field they set (``arrival.rate``,
        ``num_requests``, ``duration_s``), as ``config.yaml`` records them."""
        out: dict[str, float | int] = {}
        if self.rate is not None:
            out["arrival.rate"] = self.rate
        if self.num_requests is not None:
            out["num_requests"] = self.num_requests
        if self.duration_s is not None:
            out["duration_s"] = self.duration_s
        return out


def _check_length(ov: WorkloadOverrides, file: str) -> None:
    if ov.num_requests is not None and ov.duration_s is not None:
        raise WorkloadError(
            file,
            "num_requests",
            "give at most one of --num-requests and --duration (a workload is bounded by "
            "a request count or by a time, not both)",
        )


def override_spec(spec: WorkloadSpec, ov: WorkloadOverrides, file: str) -> WorkloadSpec:
    """``spec`` with ``ov`` applied and validated again.

    Raises:
        WorkloadError: naming ``file``, the field and the flag: a rate for an arrival
            without one (``burst``, ``piecewise``, ``closed_loop``), a duration for a
            burst, both lengths at once, or a value the spec refuses.
    """
    _check_length(ov, file)
    if not ov.given():
        return spec
    if spec.arrival is None:
        raise WorkloadError(
            file,
            "stages",
            "--rate, --num-requests and --duration set the arrival and length of a "
            "workload without stages; each stage here has its own: edit them in the file",
        )
    kind = spec.arrival.type
    if ov.rate is not None and kind not in RATED_ARRIVALS:
        raise WorkloadError(
            file,
            "arrival.rate",
            f"--rate: arrival type {kind!r} has no rate to set; --rate needs an arrival of "
            f"type {', '.join(RATED_ARRIVALS)}",
        )
    if ov.duration_s is not None and kind == "burst":
        raise WorkloadError(
            file,
            "duration_s",
            "--duration: arrival type 'burst' sends every request at t = 0 and needs "
            "num_requests; use --num-requests",
        )
    data: dict[str, Any] = spec.model_dump(mode="json", exclude_none=True)
    if ov.rate is not None:
        data["arrival"]["rate"] = float(ov.rate)
    if ov.num_requests is not None:
        data.pop("duration_s", None)
        data["num_requests"] = ov.num_requests
    if ov.duration_s is not None:
        data.pop("num_requests", None)
        data["duration_s"] = float(ov.duration_s)
    try:
        return WorkloadSpec.model_validate(data)
    except ValidationError as exc:
        flags = ", ".join(f"{FLAGS[k]} {v}" for k, v in _given_by_flag(ov).items())
        raise from_validation_error(exc, f"{file} (with {flags})", WorkloadSpec) from None


def _given_by_flag(ov: WorkloadOverrides) -> dict[str, float | int]:
    return {
        k: v
        for k, v in (
            ("rate", ov.rate),
            ("num_requests", ov.num_requests),
            ("duration_s", ov.duration_s),
        )
        if v is not None
    }


def override_trace(table: TraceTable, ov: WorkloadOverrides, file: str) -> TraceTable:
    """The first ``num_requests`` rows of a trace, or the rows arriving before
    ``duration_s``; WorkloadError for a rate, for more rows than the trace holds, or
    for a duration before the first arrival."""
    _check_length(ov, file)
    if ov.rate is not None:
        raise WorkloadError(
            file,
            "arrival_s",
            "--rate: a trace's arrival times are its own; --rate applies to a preset or "
            "a workload YAML",
        )
    if ov.num_requests is not None:
        if ov.num_requests < 1 or ov.num_requests > len(table):
            raise WorkloadError(
                file,
                "",
                f"--num-requests: the trace holds {len(table):,} requests (got "
                f"{ov.num_requests:,}; allowed: 1 to {len(table):,})",
            )
        return _head(table, ov.num_requests)
    if ov.duration_s is not None:
        keep = int((table.arrival_s < ov.duration_s).sum())
        if keep == 0:
            raise WorkloadError(
                file,
                "",
                f"--duration: no request arrives before {ov.duration_s:g} s (the first "
                f"arrives at {float(table.arrival_s[0]):g} s)",
            )
        return _head(table, keep)
    return table


def _head(table: TraceTable, n: int) -> TraceTable:
    """The first ``n`` rows of ``table`` (arrivals are sorted, so the earliest ``n``):
    every per-row column (a list or an array) cut, the rest kept."""
    cut = {}
    for f in fields(table):
        value = getattr(table, f.name)
        if isinstance(value, list | np.ndarray):
            cut[f.name] = value[:n]
    return replace(table, **cut)
