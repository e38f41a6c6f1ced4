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
(called when ``kvcore`` is imported) therefore checks the manifest against the sources
and, when any compiled module is stale, or ``KVSIM_PURE_PYTHON=1`` is set, makes every
module of the list import from its ``.py``. ``python -m kvcore.native_cli status`` says
which build runs; ``python -m kvcore.native_cli clean`` removes the compiled files.
"""

from __future__ import annotations

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
    "sim.records",
    "sim.engine_fast_forward",
    "sim.engine",
)
"""Modules mypyc compiles: kvcore's block pool, managers, request and schedulers (the
async one subclasses the sync one, and a compiled class takes only compiled subclasses), and
the simulator's engine loop with its step timing and records (the per-step path).
They type-check under mypy; ``kvcore.request_queue`` is left out (mypyc cannot compile
a subclass of ``collections.deque``). ``sim`` and ``calibrate`` import ``kvcore``
first, so the guard is in place before any of their listed modules is found."""
GROUP = "kvcore._native"
"""mypyc's group name: the compiled modules share the library ``kvcore/_native__mypyc``."""
_SHARED_LIB = "kvcore." + GROUP.rpartition(".")[2] + "__mypyc"
PURE_ENV = "KVSIM_PURE_PYTHON"


def _source(name: str) -> Path:
    return ROOT / (name.replace(".", "/") + ".py")


def _source_digest(name: str) -> str:
    return hashlib.sha256(_source(name).read_bytes()).hexdigest()


def _compiled_files(name: str) -> list[Path]:
    stem = ROOT / name.replace(".", "/")
    return [
        p
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if (p := stem.with_name(stem.name + suffix)).exists()
    ]


def _stale(compiled: Sequence[str]) -> list[str]:
    try:
        recorded = json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        recorded = {}
    return [n for n in NATIVE_MODULES if n not in compiled or recorded.get(n) != _source_digest(n)]


def _pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def status() -> tuple[str, list[str]]:
    """``("compiled" | "pure" | "stale" | "disabled", details)`` for this checkout."""
    compiled = [n for n in NATIVE_MODULES if _compiled_files(n)]
    if not compiled:
        return "pure", []
    if _pure_requested():
        return "disabled", [f"{PURE_ENV} is set"]
    stale = _stale(compiled)
    if stale:
        return "stale", stale
    return "compiled", compiled


def is_current() -> bool:
    """Whether every listed module has a compiled file matching its source (whatever
    ``KVSIM_PURE_PYTHON`` says): an in-place build would change nothing."""
    compiled = [n for n in NATIVE_MODULES if _compiled_files(n)]
    return len(compiled) == len(NATIVE_MODULES) and not _stale(compiled)


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
        sys.meta_path.insert(0, _SourceFinder(NATIVE_MODULES))
    return state


def clean() -> list[Path]:
    """Remove the compiled modules, the shared library and the manifest."""
    removed = [p for n in (*NATIVE_MODULES, _SHARED_LIB) for p in _compiled_files(n)]
    if MANIFEST.exists():
        removed.append(MANIFEST)
    for p in removed:
        p.unlink()
    return removed


def source_digests() -> dict[str, str]:
    """Each listed module's source SHA-256: the manifest a build writes."""
    return {n: _source_digest(n) for n in NATIVE_MODULES}


def write_manifest(path: Path, digests: dict[str, str]) -> None:
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
