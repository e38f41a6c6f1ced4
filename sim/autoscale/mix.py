"""Windows grouped by their request mix, and a capacity-planning workload per group.

A replica's capacity depends on the requests it serves (prompt and output lengths), not
only on their rate. Windows whose mean prompt and output lengths both lie within
:data:`MIX_TOLERANCE` of a group's first window join that group (first fit, in window
order); each group's capacity is planned on a workload of its own requests' lengths
(independent empirical draws of prompt and output lengths, Poisson arrivals). One group
of a YAML workload is planned on the workload itself, arrivals made Poisson, which also
keeps its prefix structure (an empirical copy does not: it plans without prefix hits).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from sim.autoscale.windows import Arrivals, Window

MIX_TOLERANCE = 0.2
"""Relative difference of mean prompt or output length that makes a window another mix."""


@dataclass(frozen=True)
class MixGroup:
    """Windows of one mix and their requests' lengths (tokens)."""

    windows: tuple[int, ...]
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray


def window_of(arrivals: Arrivals, window_s: float, num_windows: int) -> np.ndarray:
    """Each request's window index (as :func:`sim.autoscale.windows.arrival_windows`)."""
    return np.minimum((arrivals.arrival_s // window_s).astype(np.int64), num_windows - 1)


def same_mix(a: float, b: float) -> bool:
    """Whether mean length ``a`` is within :data:`MIX_TOLERANCE` of ``b`` (any ``a``
    when ``b`` is 0)."""
    return b <= 0 or abs(a / b - 1.0) <= MIX_TOLERANCE


def group_windows(arrivals: Arrivals, windows: list[Window], window_s: float) -> list[MixGroup]:
    """The mix groups (see the module docstring); a window without requests joins the
    first group (its rate, 0, needs the fewest replicas whatever the capacity)."""
    index = window_of(arrivals, window_s, len(windows))
    refs: list[tuple[float, float]] = []
    members: list[list[int]] = []
    for i, w in enumerate(windows):
        if w.num_requests == 0:
            continue
        for k, (p, o) in enumerate(refs):
            if same_mix(w.mean_prompt_tokens, p) and same_mix(w.mean_output_tokens, o):
                members[k].append(i)
                break
        else:
            refs.append((w.mean_prompt_tokens, w.mean_output_tokens))
            members.append([i])
    empty = [i for i, w in enumerate(windows) if w.num_requests == 0]
    if not members:
        members = [[]]
    members[0] = sorted(members[0] + empty)
    out = []
    for ids in members:
        sel = np.isin(index, ids)
        out.append(MixGroup(tuple(ids), arrivals.prompt_tokens[sel], arrivals.output_tokens[sel]))
    return out


def empirical_workload(group: MixGroup, name: str, seed: int, directory: Path) -> Path:
    """A Poisson workload drawing ``group``'s prompt and output lengths, written with its
    length files into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for kind, values in (("prompt", group.prompt_tokens), ("output", group.output_tokens)):
        text = "".join(f"{int(v)}\n" for v in values)
        (directory / f"{name}-{kind}.txt").write_text(text, encoding="utf-8")
    spec = {
        "name": name,
        "description": f"request mix of windows {list(group.windows)}, for capacity planning",
        "seed": seed,
        "arrival": {"type": "poisson", "rate": 1.0},
        # absolute: the plan copies this file into each probe's directory
        "prompt_len": {
            "type": "empirical",
            "path": str(directory.resolve() / f"{name}-prompt.txt"),
        },
        "output_len": {
            "type": "empirical",
            "path": str(directory.resolve() / f"{name}-output.txt"),
        },
        "num_requests": 1000,
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path
