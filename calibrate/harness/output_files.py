"""The files ``kvsim calibrate`` writes: checked before any profiling, written atomically.

kvsim never overwrites a file it did not write: an existing ``--out`` YAML must be a
calibration file (a mapping with ``schema_version`` and ``latency``) and an existing
raw CSV beside it must start with the header kvsim writes, unless ``force``. Both are
written under a temporary name and renamed into place, so an interrupted calibration
leaves the earlier files as they were.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

import yaml

from calibrate.harness.profile_sweep import CSV_FIELDS


def _written_by_kvsim(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if path.suffix == ".csv":
        return text.splitlines()[:1] == [",".join(CSV_FIELDS)]
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return isinstance(data, dict) and "schema_version" in data and "latency" in data


def check_outputs(yaml_path: Path, force: bool = False) -> None:
    """Raise ``ValueError`` (naming ``--out`` and the file) when the calibration YAML or
    its CSV may not be written: a directory there, a file kvsim did not write (without
    ``force``), or a parent in which nothing can be created."""
    for path in (yaml_path, yaml_path.with_suffix(".csv")):
        if path.is_dir():
            raise ValueError(f"--out {yaml_path}: {path} is a directory; name a file")
        if path.exists() and not force and not _written_by_kvsim(path):
            raise ValueError(
                f"--out {yaml_path}: {path} exists and was not written by kvsim calibrate; "
                "name another file or pass --force to replace it"
            )
    parent = yaml_path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        probe = parent / f".{yaml_path.name}.probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise ValueError(f"--out {yaml_path}: cannot write in {parent}: {e.strerror}") from None


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temporary name beside ``path``, then rename it to ``path``
    (removed again when ``write`` fails or is interrupted)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
