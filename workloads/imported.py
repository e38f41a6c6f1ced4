"""A workload rebuilt from a benchmark's settings, and its YAML text.

The importers (:mod:`workloads.import_vllm_bench`, :mod:`workloads.import_inference_perf`)
return an :class:`ImportedWorkload`: the kvsim workload as plain data (checked against
:class:`workloads.spec.WorkloadSpec`) and notes on what the benchmark does that kvsim
does not model. :meth:`ImportedWorkload.to_yaml` writes it with those notes as comments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from workloads.errors import WorkloadError, from_validation_error
from workloads.spec import WorkloadSpec

HEADER = "# kvsim workload built from: "
"""The first line of every imported workload YAML (how a rewrite knows its own file)."""


@dataclass
class ImportedWorkload:
    """A kvsim workload (``data``: the YAML mapping) and notes on the import."""

    data: dict[str, Any]
    source: str
    """What it was built from (a command line, a file), for the YAML's header."""
    notes: list[str] = field(default_factory=list)
    """Settings kvsim does not model, or models differently, one line each."""

    def check(self, file: str) -> WorkloadSpec:
        """The validated spec; WorkloadError (naming ``file``) when it is not valid."""
        try:
            return WorkloadSpec.model_validate(self.data)
        except ValidationError as exc:
            raise from_validation_error(exc, file, WorkloadSpec) from None

    def to_yaml(self) -> str:
        """The workload YAML: a header naming the source, the notes, then the fields."""
        head = [f"{HEADER}{self.source}"]
        head += [f"# note: {n}" for n in self.notes]
        body = yaml.safe_dump(self.data, sort_keys=False, default_flow_style=None)
        return "\n".join(head) + "\n" + body


def require(condition: bool, file: str, field_name: str, reason: str) -> None:
    """Raise WorkloadError(file, field_name, reason) unless ``condition``."""
    if not condition:
        raise WorkloadError(file, field_name, reason)
