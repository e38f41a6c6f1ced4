"""What a differential conformance run found: its :class:`Report`, one
:class:`Mismatch` per case where kvcore and vLLM disagree, and the case files
written for a mismatch (:func:`write_case`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.conformance.compare import Diff


@dataclass
class Mismatch:
    """One case where kvcore and vLLM disagree (or one side failed)."""

    kind: str
    index: int
    diff: Diff
    files: list[str] = field(default_factory=list)

    def render(self) -> str:
        files = "".join(
            f"\n  {'replay' if f.startswith('kvsim ') else 'case file'}: {f}" for f in self.files
        )
        return f"{self.kind} case {self.index}: {self.diff.render()}{files}"


@dataclass
class Report:
    """What one differential run compared and found."""

    seed: int
    vllm_version: str | None = None
    async_scheduling: bool = False
    spec_decode: bool = False
    pd: bool = False
    """P/D disaggregation cases (``sim.conformance.pd_cases.run_pd``)."""
    traces: int = 0
    steps: int = 0
    op_cases: int = 0
    ops: int = 0
    sizing_cases: int = 0
    cudagraph_cases: int = 0
    """CUDA graph capture-size cases (:mod:`sim.conformance.cudagraph`), one per sizing
    case."""
    mismatches: list[Mismatch] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.mismatches


def write_case(out_dir: Path, name: str, files: dict[str, Any]) -> list[str]:
    """Write a case's parts to ``out_dir`` as ``<name>.<suffix>.json`` (one per entry
    of ``files``: suffix -> data); returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for suffix, data in files.items():
        path = out_dir / f"{name}.{suffix}.json"
        path.write_text(json.dumps(data, indent=1) + "\n")
        paths.append(str(path))
    return paths
