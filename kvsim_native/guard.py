"""The guard of the compiled build: which build of the hot modules runs, from the
extension files actually on disk and the build's manifest.

Python imports an extension module in preference to the ``.py`` beside it, so a build
that no longer matches its sources would silently run old code. :func:`install_guard`
(called when ``kvsim_native`` is imported, which ``kvcore``, ``sim``, ``calibrate`` and
``workloads`` do first) therefore checks the extension files in :data:`PACKAGES`
against the manifest: the build is stale when a listed module is not compiled or its
source changed, when an extension file is not on today's list (left from an earlier
build), or when a project module the compiled ones import (recorded under ``depends``,
see :func:`kvsim_native.depends.build_dependencies`) changed. When stale, or with
``KVSIM_PURE_PYTHON=1``, every listed module (and every unlisted one with a ``.py``)
imports from its source.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
ROOT = PACKAGE_DIR.parent
"""The directory holding the ``kvcore``, ``calibrate`` and ``sim`` packages."""
MANIFEST = PACKAGE_DIR / "manifest.json"
"""The build's source digests, written by every build (:mod:`kvsim_native.build`)."""
NATIVE_MODULES = (
    "kvcore.utils",
    "kvcore.kv_cache_block",
    "kvcore.block_pool",
    "kvcore.block_hashing",
    "kvcore.single_type_kv_cache_manager",
    "kvcore.kv_cache_coordinator",
    "kvcore.kv_cache_manager",
    "kvcore.request",
    "kvcore.sched_output",
    "kvcore.scheduler",
    "kvcore.async_scheduler",
    "kvcore.batch_queue",
    "kvcore.stretch_blocks",
    "kvcore.stretch_joins",
    "kvcore.join_foresight",
    "kvcore.fast_forward",
    "kvcore.fast_forward_async",
    "kvcore.fast_forward_async_plan",
    "calibrate.roofline_scalar",
    "sim.engine.step_timing",
    "sim.engine.step_cost",
    "sim.records.step_row",
    "sim.records.step_rows",
    "sim.records.recorders",
    "sim.records.request_recorder",
    "sim.engine.stretches",
    "sim.engine.async_row_runs",
    "sim.engine.stretches_async",
    "sim.engine.stretch_arrivals",
    "sim.engine.feed_rows",
    "sim.engine.stretch_feed",
    "sim.engine.replica_parts",
    "sim.engine.replica_requests",
    "sim.engine.replica",
    "sim.engine.replica_async",
    "sim.engine.connector",
    "sim.engine.offload",
    "sim.engine.pd",
    "workloads.request",
    "workloads.feed",
    "workloads.trace_rows",
)
"""Modules mypyc compiles: kvcore's block pool, managers, request and schedulers (the
async one subclasses the sync one, and a compiled class takes only compiled subclasses)
with the batch queue that drives the async one and the exact fast-forwards, and the
simulator's engine loops (``sim.engine``: the requests' side, the synchronous and
async loops) with their step timing and costs, typed step rows and records (the
per-step path), and the engines with a KV connector (subclasses of the engine's: the
async loop with a connector, the CPU offload tier's, the P/D instance's), and what the
workloads build per arrival (the request, the feed of a replay's upcoming requests, a
trace row's request). They type-check under mypy; ``kvcore.request_queue`` is left out
(mypyc cannot compile a subclass of ``collections.deque``). ``kvcore``, ``sim``,
``calibrate`` and ``workloads`` import ``kvsim_native`` first, so the guard is in place
before any listed module is found."""
GROUP = "kvsim_native.hot"
"""mypyc's group name: the compiled modules share the library ``kvsim_native/hot__mypyc``."""
SHARED_LIB = GROUP + "__mypyc"
PURE_ENV = "KVSIM_PURE_PYTHON"

PACKAGES = ("kvsim_native", "kvcore", "calibrate", "sim", "workloads")
"""The packages a build puts extension files in: the guard looks at every one of them
(a file no longer on the build list is stale, and :func:`clean` removes it)."""
MANIFEST_FORMAT = 2


def source_path(name: str) -> Path:
    """The source of module ``name`` under :data:`ROOT` (a package's ``__init__.py``)."""
    path = ROOT / (name.replace(".", "/") + ".py")
    package = ROOT / name.replace(".", "/") / "__init__.py"
    return package if not path.exists() and package.exists() else path


def source_digest(name: str) -> str | None:
    """The SHA-256 of ``name``'s source; None when it cannot be read."""
    try:
        return hashlib.sha256(source_path(name).read_bytes()).hexdigest()
    except OSError:
        return None


def compiled_files(name: str) -> list[Path]:
    """The extension files of module ``name`` beside its source."""
    stem = ROOT / name.replace(".", "/")
    return [
        p
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if (p := stem.with_name(stem.name + suffix)).exists()
    ]


def _extension_module(path: Path) -> str | None:
    """The module an extension file ``path`` under :data:`ROOT` holds (None: not one)."""
    for suffix in sorted(importlib.machinery.EXTENSION_SUFFIXES, key=len, reverse=True):
        if path.name.endswith(suffix):
            parts = path.relative_to(ROOT).parent.parts
            return ".".join((*parts, path.name[: -len(suffix)]))
    return None


def extensions_on_disk() -> dict[str, list[Path]]:
    """Every extension file in :data:`PACKAGES`, by the module it holds (sorted).

    Walked with ``os.walk``, looking at names with an extension's suffix only: every
    process of a run checks its build when it starts (about 1 ms; 9 ms for the
    ``Path.rglob`` of every file this replaced)."""
    found: dict[str, list[Path]] = {}
    endings = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for package in PACKAGES:
        base = ROOT / package
        if not base.is_dir():
            continue
        paths = [
            Path(folder, file)
            for folder, _, files in os.walk(base)
            for file in files
            if file.endswith(endings)
        ]
        for path in sorted(paths):
            name = _extension_module(path) if path.is_file() else None
            if name is not None:
                found.setdefault(name, []).append(path)
    return found


def read_manifest() -> tuple[dict[str, str], dict[str, str]] | None:
    """``(compiled, depends)`` digests from the manifest; None when there is none, it is
    unreadable or of an earlier format."""
    try:
        recorded = json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(recorded, dict) or recorded.get("format") != MANIFEST_FORMAT:
        return None
    return dict(recorded.get("compiled", {})), dict(recorded.get("depends", {}))


def _stale(on_disk: dict[str, list[Path]]) -> list[str]:
    """What makes the build on disk stale, one item per module: a listed module not
    compiled or edited since, an extension no longer on the list, an edited or missing
    module the build imports."""
    manifest = read_manifest()
    compiled, depends = manifest if manifest is not None else ({}, {})
    stale = [n for n in NATIVE_MODULES if n not in on_disk or compiled.get(n) != source_digest(n)]
    stale += [
        f"{n} (no longer built)" for n in on_disk if n not in NATIVE_MODULES and n != SHARED_LIB
    ]
    stale += [f"{n} (imported by the build)" for n, d in depends.items() if source_digest(n) != d]
    return stale


def pure_requested() -> bool:
    """Whether ``KVSIM_PURE_PYTHON`` asks for the pure modules."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def status() -> tuple[str, list[str]]:
    """``("compiled" | "pure" | "stale" | "disabled", details)`` for this checkout, from
    the extension files on disk and the manifest."""
    on_disk = extensions_on_disk()
    if not on_disk:
        return "pure", []
    if pure_requested():
        return "disabled", [f"{PURE_ENV} is set"]
    stale = _stale(on_disk)
    if stale:
        return "stale", stale
    return "compiled", [n for n in NATIVE_MODULES if n in on_disk]


def is_current() -> bool:
    """Whether the build on disk matches the sources, whatever ``KVSIM_PURE_PYTHON``
    says: an in-place build would change nothing."""
    on_disk = extensions_on_disk()
    return bool(on_disk) and not _stale(on_disk)


BUILD_LABELS = {
    "compiled": "compiled (mypyc)",
    "pure": "pure Python (not compiled)",
    "stale": "pure Python (the compiled build no longer matches the sources: reinstall)",
    "disabled": f"pure Python ({PURE_ENV} is set)",
}
"""What ``kvsim version`` says of each :func:`status`."""


class SourceFinder:
    """A meta-path finder that imports the listed modules from their ``.py``."""

    def __init__(self, names: Sequence[str]) -> None:
        self.fullnames = {n: source_path(n) for n in names}

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        source = self.fullnames.get(fullname)
        if source is None:
            return None
        return importlib.util.spec_from_file_location(fullname, source)


def install_guard() -> str:
    """Make stale or disabled compiled modules import from source; returns the status."""
    state, _ = status()
    if state in ("stale", "disabled") and not any(
        isinstance(f, SourceFinder) for f in sys.meta_path
    ):
        unlisted = [n for n in extensions_on_disk() if n not in NATIVE_MODULES]
        sources = [n for n in unlisted if n != SHARED_LIB and source_path(n).exists()]
        sys.meta_path.insert(0, SourceFinder([*NATIVE_MODULES, *sources]))
    return state


def clean() -> list[Path]:
    """Remove every extension file in :data:`PACKAGES` (the compiled modules, the shared
    library, any left from an earlier build list) and the manifest; returns what it
    removed."""
    removed = [p for paths in extensions_on_disk().values() for p in paths]
    if MANIFEST.exists():
        removed.append(MANIFEST)
    for p in removed:
        p.unlink()
    return removed
