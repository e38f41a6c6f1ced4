"""A stand-in for ``mypyc.build`` (copied to ``mypyc/build.py`` on the path of the build
step that ``tests/test_native.py`` runs): the extensions mypyc would make, each from a
tiny real C module, so the build step is tested without type-checking the package.
``FAKE_MYPYC_FAILS=1`` makes it fail as mypy does on a type error."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from setuptools import Extension

C_MODULE = """#include <Python.h>
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "%s", 0, -1, 0};
PyMODINIT_FUNC PyInit_%s(void) { return PyModule_Create(&m); }
"""


def mypycify(paths: list[str], *, target_dir: str, group_name: str, **_: Any) -> list[Extension]:
    """One extension per ``.py`` in ``paths``, and the group's shared library."""
    if os.environ.get("FAKE_MYPYC_FAILS"):
        raise SystemExit("error: mypy found 1 error in kvcore/block_pool.py")
    names = [p[: -len(".py")].replace("/", ".") for p in paths if p.endswith(".py")]
    names.append(group_name + "__mypyc")
    Path(target_dir).mkdir(parents=True, exist_ok=True)
    extensions = []
    for name in names:
        short = name.rpartition(".")[2]
        c = Path(target_dir) / (name + ".c")
        c.write_text(C_MODULE % (short, short))
        extensions.append(Extension(name, [str(c)]))
    return extensions
