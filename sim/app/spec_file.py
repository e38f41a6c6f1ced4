"""Reading a spec (plan, recommend) from a YAML file and command-line flags.

One place for what both do: safe YAML loading, one line naming the file (and the
line of a syntax error) when it cannot be read, a mapping at the top level, then the
flags laid over it by dotted key (``search.low``), flags winning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workloads.errors import WorkloadError, yaml_problem


def spec_data(
    path: str | None, overrides: dict[str, Any], kind: str, error: type[Exception]
) -> dict[str, Any]:
    """The raw mapping of a ``kind`` spec (e.g. ``"plan"``) at ``path`` (None: flags
    only) with ``overrides`` (dotted keys; None values skipped) set on it; ``error``
    (one message naming the file) when the file cannot be read or is not a mapping."""
    import yaml

    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as e:
            raise error(f"{path}: cannot read {kind} file: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise error(str(WorkloadError(path, *yaml_problem(e)))) from None
        if not isinstance(loaded, dict):
            raise error(f"{path}: (top level): a {kind} spec must be a YAML mapping")
        data = loaded
    for key, value in overrides.items():
        if value is not None:
            set_dotted(data, key, value)
    return data


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``data[a][b] = value`` for ``key`` ``"a.b"``, copying the mappings on the
    way (the caller's nested dicts are not changed)."""
    parts = key.split(".")
    target = data
    for part in parts[:-1]:
        sub = target.get(part)
        target[part] = sub = dict(sub) if isinstance(sub, dict) else {}
        target = sub
    target[parts[-1]] = value
