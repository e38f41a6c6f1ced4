"""Making the compiled build: mypyc's extensions of :data:`kvsim_native.guard.NATIVE_MODULES`
(``setup.py`` compiles them at install time, :func:`build` in place), the manifest of
source digests the guard checks, and the one-line notice of a fall-back to pure Python.

Stdlib-only at import time (``setup.py`` loads it in a build environment without the
project's dependencies); mypyc and setuptools are imported where a build runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any

from kvsim_native import guard
from kvsim_native.depends import build_dependencies

BUILD_IMPORTS = ("numpy", "simpy", "cbor2", "xxhash")
"""The third-party packages :data:`~kvsim_native.guard.NATIVE_MODULES` import, build
requirements too (``pyproject.toml``): mypyc must see their types. Were one missing, mypy
would take its names as ``Any`` (``--ignore-missing-imports``) and mypyc would compile a
class deriving from one of its classes (``sim.engine.stretches.StepTimeout`` from
``simpy.Timeout``) into one that fails at run time; :func:`mypyc_extensions` refuses to
build then."""

MYPYC_OPTIONS = (
    "--ignore-missing-imports",
    "--follow-imports=silent",
    "--disable-error-code=annotation-unchecked",
)
"""mypy options of the build. The modules the compiled ones import from elsewhere in the
package (followed silently, not compiled) import third-party packages that pip's isolated
build environment lacks (pandas, pydantic, ...): mypy takes those as ``Any``, which
only costs the compiled code some type knowledge of values that come from them."""


def source_digests() -> dict[str, Any]:
    """The manifest a build writes: each listed module's source SHA-256 (``compiled``)
    and each module the build imports (``depends``, :func:`build_dependencies`)."""
    return {
        "format": guard.MANIFEST_FORMAT,
        "compiled": {n: guard.source_digest(n) for n in guard.NATIVE_MODULES},
        "depends": {n: guard.source_digest(n) for n in build_dependencies()},
    }


def write_manifest(path: Path, digests: dict[str, Any]) -> None:
    """Write the manifest ``digests`` (taken before compiling) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")


def extension_names() -> tuple[str, ...]:
    """The extension modules a build makes: one per listed module, and the group's shared
    library."""
    return (*guard.NATIVE_MODULES, guard.SHARED_LIB)


COMPILE_ARGS = ["-fvisibility=hidden"] if os.name != "nt" else []
"""Added to the C compiler's arguments (GCC and clang): the group's library exports only
its module's init function (the compiled modules reach its functions through the table
it hands them, not by symbol), so calls between compiled functions go straight to them,
not through the library's symbol table, and the compiler may inline across them. The
main process of a 4,000-request trace run: 0.9% fewer instructions (callgrind); of a
20,000-request one, CPU time paired against a build without: medians 0.96 and 0.97 (6
pairs each, a noisy host)."""


def mypyc_extensions(target_dir: Path) -> list[Any]:
    """Type-check the listed modules and generate their C code into ``target_dir``;
    returns the setuptools ``Extension`` objects to compile (one per module and the
    group's shared library). Raises ``SystemExit`` when mypy finds errors, and
    ``ImportError`` when a package of :data:`BUILD_IMPORTS` is not installed."""
    missing = [m for m in BUILD_IMPORTS if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"{', '.join(missing)} not installed where the build runs")
    from mypyc.build import mypycify

    root = guard.ROOT
    sources = [str(guard.source_path(n).relative_to(root)) for n in guard.NATIVE_MODULES]
    cwd = os.getcwd()
    os.chdir(root)  # mypyc names modules after the source paths, relative to ROOT
    try:
        extensions = list(
            mypycify(
                [*MYPYC_OPTIONS, *sources],
                opt_level="3",
                target_dir=str(target_dir),
                group_name=guard.GROUP,
            )
        )
    finally:
        os.chdir(cwd)
    for ext in extensions:
        ext.extra_compile_args = [*ext.extra_compile_args, *COMPILE_ARGS]
    return extensions


def fallback_notice(reason: str) -> str:
    """The one line an install (or build) prints when it goes on in pure Python; a
    compiler's command line in ``reason`` is cut to its program."""
    reason = re.sub(r"'?\['([^']*)'(?:, '[^']*')*\]'?", r"'\1 ...'", " ".join(reason.split()))
    reason = (reason if len(reason) <= 300 else reason[:297] + "...") or "unknown error"
    return (
        f"kvsim: the hot modules stay pure Python (slower, same results): {reason}; "
        "a C compiler and a reinstall (or python -m kvsim_native build) compile them"
    )


SOURCE_PACKAGES = ("kvsim_native", "kvcore", "workloads", "sim", "calibrate", "reports")
"""The project's packages, whose modules :func:`byte_compile` compiles."""


def byte_compile(root: Path = guard.ROOT) -> None:
    """Write the bytecode cache (``__pycache__/*.pyc``) of every module of the packages
    under ``root``, as ``pip install .`` does for a wheel; an editable install's build
    step and :func:`build` call it. Without it, where ``PYTHONDONTWRITEBYTECODE`` is
    set (common in containers) every ``kvsim`` process, and each of its helper
    processes, compiles the project's source again: about a second of a 20,000-request
    trace run's wall time on a 2-core machine (measured 7.10 s against 6.10 s). A module
    edited afterwards is compiled from its source as usual (the cache records the
    source's modification time and size)."""
    import compileall

    for package in SOURCE_PACKAGES:
        if (root / package).is_dir():
            compileall.compile_dir(root / package, quiet=1)


def build() -> None:
    """Compile the listed modules with mypyc in place (beside their sources, the shared
    library in ``kvsim_native/``), write the manifest and the bytecode cache
    (:func:`byte_compile`, as an editable install does); an earlier build is removed
    first."""
    import shutil
    import tempfile

    from setuptools import setup

    guard.clean()
    digests = source_digests()
    with tempfile.TemporaryDirectory() as tmp:
        extensions = mypyc_extensions(Path(tmp) / "c")
        cwd = os.getcwd()
        os.chdir(guard.ROOT)
        try:
            setup(
                name="kvsim-native",
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
                shutil.copyfile(built, guard.ROOT / built.relative_to(lib))
    write_manifest(guard.MANIFEST, digests)
    byte_compile()
