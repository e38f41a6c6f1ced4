"""The size rules of docs/architecture.md, as a test: no function body over 60 lines and
no module over 330 lines without a reason.

A function's body is counted from its first statement after the docstring to its end
(a command's options, part of its signature, do not count). The reason is a paragraph
of the docstring that starts with ``Why long:``. A kvcore module may be longer when it
mirrors one vLLM file (its docstring names it, ``vllm/...py``): kvcore
keeps one module per vLLM file so the two read side by side.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("kvcore", "sim", "calibrate", "workloads", "reports", "kvsim_native")
MAX_BODY_LINES = 60
MAX_MODULE_LINES = 330
REASON = "Why long:"
MIRRORED_FILE = re.compile(r"vllm/[\w/]+\.py")


def _body_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = fn.body
    if ast.get_docstring(fn) is not None:
        body = body[1:]
    if not body:
        return 0
    assert fn.end_lineno is not None
    return fn.end_lineno - body[0].lineno + 1


def long_functions(source: str, where: str) -> list[str]:
    """``where:line name (N lines)`` of each function of ``source`` whose body is over
    the limit and whose docstring gives no reason."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            n = _body_lines(node)
            if n > MAX_BODY_LINES and REASON not in (ast.get_docstring(node) or ""):
                found.append(f"{where}:{node.lineno} {node.name} ({n} lines)")
    return found


def long_module(source: str, where: str, package: str) -> str | None:
    """``where (N lines)`` when ``source`` is over the limit with no reason given."""
    n = source.count("\n") + (not source.endswith("\n"))
    if n <= MAX_MODULE_LINES:
        return None
    doc = ast.get_docstring(ast.parse(source)) or ""
    if REASON in doc or (package == "kvcore" and MIRRORED_FILE.search(doc)):
        return None
    return f"{where} ({n} lines)"


def _sources() -> list[tuple[str, str, str]]:
    out = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            out.append((str(path.relative_to(REPO)), package, path.read_text()))
    return out


def test_the_finders_can_fail() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_BODY_LINES + 1))
    long_fn = f'def f():\n    """Does things."""\n{body}'
    assert long_functions(long_fn, "m.py") == [f"m.py:1 f ({MAX_BODY_LINES + 1} lines)"]
    reasoned = f'def f():\n    """Does things.\n\n    {REASON} one loop."""\n{body}'
    assert long_functions(reasoned, "m.py") == []
    short = f'def f():\n    """Does things."""\n{body[: -len("    x60 = 60")]}'
    assert long_functions(short.rsplit("\n", 2)[0] + "\n", "m.py") == []
    module = '"""A module."""\n' + "x = 1\n" * MAX_MODULE_LINES
    assert long_module(module, "m.py", "sim") == f"m.py ({MAX_MODULE_LINES + 1} lines)"
    mirror = '"""Mirrors vllm/v1/core/block_pool.py."""\n' + "x = 1\n" * MAX_MODULE_LINES
    assert long_module(mirror, "m.py", "kvcore") is None
    assert long_module(mirror, "m.py", "sim") is not None


def test_no_long_function_without_a_reason() -> None:
    found = [f for where, _, src in _sources() for f in long_functions(src, where)]
    assert not found, "functions over the limit with no 'Why long:' paragraph:\n" + "\n".join(found)


def test_no_long_module_without_a_reason() -> None:
    found = [m for where, pkg, src in _sources() if (m := long_module(src, where, pkg))]
    assert not found, "modules over the limit with no reason:\n" + "\n".join(found)
