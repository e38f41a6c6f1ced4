"""Compiled builds of the hot modules (kvcore's and the simulator's per-step path), and
the guard that uses them only while they match their sources.

Installing kvsim (``pip install .`` or ``pip install -e .``; ``setup.py``) compiles
:data:`NATIVE_MODULES` with mypyc (a part of mypy, a build requirement; needs a C
compiler) into extension modules beside the sources, and records each source's SHA-256 in
``kvcore/_native_manifest.json``. Where that cannot be done (no C compiler, mypyc fails,
or ``KVSIM_PURE_PYTHON=1`` at install time) the install goes on in pure Python and says
so in one line (:func:`fallback_notice`; pip shows it with ``-v``, ``kvsim version``
always tells which build runs). ``python -m kvcore.native_cli build`` rebuilds in place
without reinstalling. Compiled modules run the same Python code (same results, block for
block; the tests run on whichever build is installed), about twice as fast on benchmark
(a) of ``tests/bench/bench_fastforward.py``.

Python imports an extension module in preference to the ``.py`` beside it, so a build
that no longer matches its sources would silently run old code. :func:`install_guard`
(called when ``kvcore`` is imported, which ``sim`` and ``calibrate`` do first) therefore
checks the extension files actually on disk in :data:`PACKAGES` against the manifest:
the build is stale when a listed module is not compiled or its source changed, when an
extension file is not on today's list (left from an earlier build), or when a project
module the compiled ones import (:func:`build_dependencies`, whose types mypyc compiled
against) changed. When stale, or with ``KVSIM_PURE_PYTHON=1``, every listed module (and
every unlisted one with a ``.py``) imports from its source. ``python -m
kvcore.native_cli status`` says which build runs; ``python -m kvcore.native_cli clean``
removes the compiled files.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent
ROOT = PACKAGE_DIR.parent
"""The directory holding the ``kvcore``, ``calibrate`` and ``sim`` packages."""
MANIFEST = PACKAGE_DIR / "_native_manifest.json"
NATIVE_MODULES = (
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
    "kvcore.fast_forward",
    "kvcore.fast_forward_async",
    "calibrate.roofline_scalar",
    "sim.step_timing",
    "sim.step_row",
    "sim.records",
    "sim.engine_fast_forward",
    "sim.engine",
    "sim.pd_engine",
)
"""Modules mypyc compiles: kvcore's block pool, managers, request and schedulers (the
async one subclasses the sync one, and a compiled class takes only compiled subclasses), and
the simulator's engine loop with its step timing, typed step rows and records (the
per-step path), and the P/D instance's loop (a subclass of the engine's).
They type-check under mypy; ``kvcore.request_queue`` is left out (mypyc cannot compile
a subclass of ``collections.deque``). ``sim`` and ``calibrate`` import ``kvcore``
first, so the guard is in place before any of their listed modules is found."""
GROUP = "kvcore._native"
"""mypyc's group name: the compiled modules share the library ``kvcore/_native__mypyc``."""
_SHARED_LIB = "kvcore." + GROUP.rpartition(".")[2] + "__mypyc"
PURE_ENV = "KVSIM_PURE_PYTHON"


PACKAGES = ("kvcore", "calibrate", "sim")
"""The packages compiled modules lie in: the guard looks at every extension file in them
(a file no longer on the build list is stale, and :func:`clean` removes it)."""
PROJECT_PACKAGES = ("kvcore", "workloads", "sim", "calibrate", "reports")
"""The project's packages: a compiled module's imports from these are hashed too."""
MANIFEST_FORMAT = 2


def _source(name: str) -> Path:
    path = ROOT / (name.replace(".", "/") + ".py")
    package = ROOT / name.replace(".", "/") / "__init__.py"
    return package if not path.exists() and package.exists() else path


def _source_digest(name: str) -> str | None:
    try:
        return hashlib.sha256(_source(name).read_bytes()).hexdigest()
    except OSError:
        return None


def _compiled_files(name: str) -> list[Path]:
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
    """Every extension file in :data:`PACKAGES`, by the module it holds (sorted)."""
    found: dict[str, list[Path]] = {}
    for package in PACKAGES:
        base = ROOT / package
        if not base.is_dir():
            continue
        endings = {Path(suffix).suffix for suffix in importlib.machinery.EXTENSION_SUFFIXES}
        paths = {p for ending in endings for p in base.rglob("*" + ending)}
        for path in sorted(paths):
            name = _extension_module(path) if path.is_file() else None
            if name is not None:
                found.setdefault(name, []).append(path)
    return found


def imported_names(node: ast.stmt, package: str) -> set[str]:
    """The dotted names an import statement ``node`` in ``package`` names (relative
    imports resolved; ``from a import b`` names ``a`` and ``a.b``); empty for any other
    statement."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if not isinstance(node, ast.ImportFrom):
        return set()
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    return {base, *(f"{base}.{alias.name}" for alias in node.names)}


def project_imports(name: str) -> set[str]:
    """The project modules (and their parent packages) that ``name``'s source imports,
    anywhere in it (mypy reads function-level imports too)."""
    source = _source(name)
    tree = ast.parse(source.read_text())
    package = name if source.name == "__init__.py" else name.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            named |= imported_names(node, package)
    found = set()
    for module in named:
        parts = module.split(".")
        if parts[0] not in PROJECT_PACKAGES:
            continue
        for i in range(1, len(parts) + 1):
            candidate = ".".join(parts[:i])
            if _source(candidate).exists():
                found.add(candidate)
    return found


def build_dependencies() -> list[str]:
    """The project modules the compiled ones import, directly or not, that are not
    compiled themselves: mypyc compiles against their types, so an edit to one makes the
    build stale as an edit to a compiled module does."""
    seen = set(NATIVE_MODULES)
    todo = list(NATIVE_MODULES)
    while todo:
        for module in project_imports(todo.pop()):
            if module not in seen:
                seen.add(module)
                todo.append(module)
    return sorted(seen - set(NATIVE_MODULES))


def _read_manifest() -> tuple[dict[str, str], dict[str, str]] | None:
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
    manifest = _read_manifest()
    compiled, depends = manifest if manifest is not None else ({}, {})
    stale = [n for n in NATIVE_MODULES if n not in on_disk or compiled.get(n) != _source_digest(n)]
    stale += [
        f"{n} (no longer built)" for n in on_disk if n not in NATIVE_MODULES and n != _SHARED_LIB
    ]
    stale += [f"{n} (imported by the build)" for n, d in depends.items() if _source_digest(n) != d]
    return stale


def _pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def status() -> tuple[str, list[str]]:
    """``("compiled" | "pure" | "stale" | "disabled", details)`` for this checkout, from
    the extension files on disk and the manifest."""
    on_disk = extensions_on_disk()
    if not on_disk:
        return "pure", []
    if _pure_requested():
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


class _SourceFinder:
    """A meta-path finder that imports the listed modules from their ``.py``."""

    def __init__(self, names: Sequence[str]) -> None:
        self.fullnames = {n: _source(n) for n in names}

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        source = self.fullnames.get(fullname)
        if source is None:
            return None
        return importlib.util.spec_from_file_location(fullname, source)


def install_guard() -> str:
    """Make stale or disabled compiled modules import from source; returns the status."""
    state, _ = status()
    if state in ("stale", "disabled") and not any(
        isinstance(f, _SourceFinder) for f in sys.meta_path
    ):
        unlisted = [n for n in extensions_on_disk() if n not in NATIVE_MODULES]
        sources = [n for n in unlisted if n != _SHARED_LIB and _source(n).exists()]
        sys.meta_path.insert(0, _SourceFinder([*NATIVE_MODULES, *sources]))
    return state


def clean() -> list[Path]:
    """Remove every extension file in :data:`PACKAGES` (the compiled modules, the shared
    library, any left from an earlier build list) and the manifest."""
    removed = [p for paths in extensions_on_disk().values() for p in paths]
    if MANIFEST.exists():
        removed.append(MANIFEST)
    for p in removed:
        p.unlink()
    return removed


def source_digests() -> dict[str, Any]:
    """The manifest a build writes: each listed module's source SHA-256 (``compiled``)
    and each module the build imports (``depends``, :func:`build_dependencies`)."""
    return {
        "format": MANIFEST_FORMAT,
        "compiled": {n: _source_digest(n) for n in NATIVE_MODULES},
        "depends": {n: _source_digest(n) for n in build_dependencies()},
    }


def write_manifest(path: Path, digests: dict[str, Any]) -> None:
    """Write the manifest ``digests`` (taken before compiling) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")


BUILD_IMPORTS = ("numpy", "simpy", "cbor2", "xxhash")
"""The third-party packages :data:`NATIVE_MODULES` import, build requirements too
(``pyproject.toml``): mypyc must see their types. Were one missing, mypy would take its
names as ``Any`` (``--ignore-missing-imports``) and mypyc would compile a class deriving
from one of its classes (``sim.engine_fast_forward.StepTimeout`` from ``simpy.Timeout``)
into one that fails at run time; :func:`mypyc_extensions` refuses to build then."""

MYPYC_OPTIONS = (
    "--ignore-missing-imports",
    "--follow-imports=silent",
    "--disable-error-code=annotation-unchecked",
)
"""mypy options of the build. The modules the compiled ones import from elsewhere in the
package (followed silently, not compiled) import third-party packages that pip's isolated
build environment lacks (pandas, pydantic, ...): mypy takes those as ``Any``, which
only costs the compiled code some type knowledge of values that come from them."""


def extension_names() -> tuple[str, ...]:
    """The extension modules a build makes: one per listed module, and the group's shared
    library."""
    return (*NATIVE_MODULES, _SHARED_LIB)


def mypyc_extensions(target_dir: Path) -> list[Any]:
    """Type-check :data:`NATIVE_MODULES` and generate their C code into ``target_dir``;
    returns the setuptools ``Extension`` objects to compile (one per module and the
    group's shared library). Raises ``SystemExit`` when mypy finds errors, and
    ``ImportError`` when a package of :data:`BUILD_IMPORTS` is not installed."""
    missing = [m for m in BUILD_IMPORTS if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"{', '.join(missing)} not installed where the build runs")
    from mypyc.build import mypycify

    cwd = os.getcwd()
    os.chdir(ROOT)  # mypyc names modules after the source paths, relative to ROOT
    try:
        return list(
            mypycify(
                [*MYPYC_OPTIONS, *(str(_source(n).relative_to(ROOT)) for n in NATIVE_MODULES)],
                opt_level="3",
                target_dir=str(target_dir),
                group_name=GROUP,
            )
        )
    finally:
        os.chdir(cwd)


def fallback_notice(reason: str) -> str:
    """The one line an install (or build) prints when it goes on in pure Python; a
    compiler's command line in ``reason`` is cut to its program."""
    reason = re.sub(r"'?\['([^']*)'(?:, '[^']*')*\]'?", r"'\1 ...'", " ".join(reason.split()))
    reason = (reason if len(reason) <= 300 else reason[:297] + "...") or "unknown error"
    return (
        f"kvsim: the hot modules stay pure Python (slower, same results): {reason}; "
        "a C compiler and a reinstall (or python -m kvcore.native_cli build) compile them"
    )


def build() -> None:
    """Compile :data:`NATIVE_MODULES` with mypyc in place and write the manifest."""
    import shutil
    import tempfile

    from setuptools import setup

    clean()
    digests = source_digests()
    with tempfile.TemporaryDirectory() as tmp:
        extensions = mypyc_extensions(Path(tmp) / "c")
        cwd = os.getcwd()
        os.chdir(ROOT)
        try:
            setup(
                name="kvcore-native",
                ext_modules=extensions,
                script_args=[
                    "build_ext",
                    "--build-temp",
                    str(Path(tmp) / "o"),
                    "--build-lib",
                    str(Path(tmp) / "lib"),
                ],
            )
        finally:
            os.chdir(cwd)
        lib = Path(tmp) / "lib"
        for built in lib.rglob("*"):
            if built.is_file():
                shutil.copyfile(built, ROOT / built.relative_to(lib))
    write_manifest(MANIFEST, digests)
