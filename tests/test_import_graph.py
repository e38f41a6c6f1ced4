"""The project's import graph: no circles among module-level imports, kvcore (the port
of vLLM's core) imports nothing else of the project, anywhere in it, but kvsim_native (the
compiled build's guard, which it imports first), and kvsim_native imports nothing of
the project."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from kvsim_native.depends import imported_names

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kvsim_native", "kvcore", "workloads", "sim", "calibrate", "reports")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imported(name: str, nodes: list[ast.stmt], module_level: bool) -> set[str]:
    """The project modules ``nodes`` import (``module_level``: only statements run at
    import time, outside ``if TYPE_CHECKING:`` and functions)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in nodes:
        if module_level and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if module_level and isinstance(node, (ast.If, ast.Try, ast.With)):
            inner = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            inner += [s for h in getattr(node, "handlers", []) for s in h.body]
            found |= _imported(name, inner, module_level)
        elif isinstance(node, ast.stmt):
            found |= imported_names(node, package)
    return {m for m in found if m in MODULES and m != name}


def _tree(name: str) -> ast.Module:
    return ast.parse(MODULES[name].read_text(), filename=str(MODULES[name]))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_level_import_circles() -> None:
    graph = {n: _imported(n, _tree(n).body, module_level=True) for n in MODULES}
    assert sum(len(edges) for edges in graph.values()) > 300  # the parser sees imports
    assert _cycles(graph) == []


def _imported_anywhere(name: str) -> set[str]:
    nodes = [n for n in ast.walk(_tree(name)) if isinstance(n, ast.stmt)]
    return _imported(name, nodes, module_level=False)


def _package(module: str) -> str:
    return module.split(".")[0]


@pytest.mark.parametrize("name", [n for n in MODULES if _package(n) == "kvcore"])
def test_kvcore_imports_nothing_else_of_the_project(name: str) -> None:
    # The one exception: the package imports the compiled build's guard first.
    allowed = {"kvcore", "kvsim_native"} if name == "kvcore" else {"kvcore"}
    outside = sorted(m for m in _imported_anywhere(name) if _package(m) not in allowed)
    assert outside == [], f"{name} imports {outside}"


@pytest.mark.parametrize("name", [n for n in MODULES if _package(n) == "kvsim_native"])
def test_kvsim_native_imports_nothing_of_the_project(name: str) -> None:
    """The build's guard runs before any other module of the project is imported (and
    ``setup.py`` loads it where none is installed)."""
    outside = sorted(m for m in _imported_anywhere(name) if _package(m) != "kvsim_native")
    assert outside == [], f"{name} imports {outside}"
    # At import time, the standard library only (mypyc and setuptools where a build runs).
    nodes = [n for n in _tree(name).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    tops = {_package(m) for node in nodes for m in imported_names(node, name)}
    assert tops <= {*sys.stdlib_module_names, "kvsim_native"}, f"{name} imports {tops}"
