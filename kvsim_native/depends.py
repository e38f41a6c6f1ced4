"""The project modules the compiled build depends on: mypyc compiles against the types of
the uncompiled modules the compiled ones import, so the build's manifest hashes those
too (``depends``) and an edit to one makes the build stale."""

from __future__ import annotations

import ast

from kvsim_native import guard

PROJECT_PACKAGES = ("kvcore", "workloads", "sim", "calibrate", "reports")
"""The project's packages: a compiled module's imports from these are hashed too."""


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
    source = guard.source_path(name)
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
            if guard.source_path(candidate).exists():
                found.add(candidate)
    return found


def build_dependencies() -> list[str]:
    """The project modules the compiled ones import, directly or not, that are not
    compiled themselves: mypyc compiles against their types, so an edit to one makes the
    build stale as an edit to a compiled module does."""
    seen = set(guard.NATIVE_MODULES)
    todo = list(guard.NATIVE_MODULES)
    while todo:
        for module in project_imports(todo.pop()):
            if module not in seen:
                seen.add(module)
                todo.append(module)
    return sorted(seen - set(guard.NATIVE_MODULES))
