"""The compiled build of the hot modules (kvcore's and the simulator's per-step path),
and the guard that uses it only while it matches its sources. Standard library only, and
nothing else of the project: ``kvcore``, ``sim`` and ``calibrate`` import it first, so
importing it installs the guard (:data:`NATIVE_STATUS`) before any compiled module is
found.

Installing kvsim (``pip install .`` or ``pip install -e .``; ``setup.py``) compiles
:data:`~kvsim_native.guard.NATIVE_MODULES` with mypyc (a part of mypy, a build
requirement; needs a C compiler) into extension modules beside the sources, their shared
library in this package, and records each source's SHA-256, and that of each project
module they import, in ``kvsim_native/manifest.json`` (:mod:`kvsim_native.build`,
:mod:`kvsim_native.depends`). Where that cannot be done (no C compiler, mypyc fails, or
``KVSIM_PURE_PYTHON=1`` at install time) the install goes on in pure Python and says so
in one line (pip shows it with ``-v``; ``kvsim version`` and every run's ``config.yaml``
tell which build ran). Compiled modules run the same Python code (same results, block
for block; the tests run on whichever build is installed), about twice as fast on
benchmark (a) of ``tests/bench/bench_fastforward.py``.

:mod:`kvsim_native.guard` checks the extension files on disk against the manifest and,
when the build is stale (or ``KVSIM_PURE_PYTHON=1``), imports every listed module from
its source. ``python -m kvsim_native status`` says which build runs, ``... build``
rebuilds in place without reinstalling, ``... clean`` removes the compiled files.
"""

from __future__ import annotations

from kvsim_native.guard import (
    BUILD_LABELS,
    NATIVE_MODULES,
    PURE_ENV,
    clean,
    install_guard,
    is_current,
    status,
)

__all__ = [
    "BUILD_LABELS",
    "NATIVE_MODULES",
    "NATIVE_STATUS",
    "PURE_ENV",
    "clean",
    "install_guard",
    "is_current",
    "status",
]

NATIVE_STATUS = install_guard()
"""Which build of the hot modules runs: "compiled" (mypyc), "pure", or "stale" /
"disabled" (compiled files present but not used: they do not match their sources, or
``KVSIM_PURE_PYTHON=1``)."""
