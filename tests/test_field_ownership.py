"""Each class owns its fields: no module of ``sim/`` (nor kvcore's fast-forward) assigns
another object's underscore field, and SimPy's private names are used only in
``sim/engine/simpy_internals.py``, the compatibility module whose own tests pin them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SIMPY_PRIVATE = {"_queue", "_eid", "_ok", "_value"}
"""The SimPy internals the simulator relies on (``sim/engine/simpy_internals.py``)."""


def _sources() -> list[Path]:
    paths = sorted((REPO / "sim").rglob("*.py"))
    return paths + sorted((REPO / "kvcore").glob("fast_forward*.py"))


def _is_own(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def foreign_private_assignments(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, target)`` of each assignment to ``x._field`` where ``x`` is not ``self``
    or ``cls`` (dunder names aside)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for t in ast.walk(target):
                if (
                    isinstance(t, ast.Attribute)
                    and isinstance(t.ctx, ast.Store)
                    and t.attr.startswith("_")
                    and not t.attr.startswith("__")
                    and not _is_own(t.value)
                ):
                    found.append((t.lineno, ast.unparse(t)))
    return found


def simpy_private_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, expression)`` of each use of a SimPy private name on an object other than
    ``self``."""
    return [
        (n.lineno, ast.unparse(n))
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and n.attr in SIMPY_PRIVATE and not _is_own(n.value)
    ]


def test_the_finders_find_what_they_look_for() -> None:
    tree = ast.parse(
        "self._a = 1\nother._b = 2\nx.y._c += 1\nself.__d = 3\nev._ok = True\n"
        "t = env._queue[0]\n(a._e, self._f) = (1, 2)\n"
    )
    assert foreign_private_assignments(tree) == [
        (2, "other._b"),
        (3, "x.y._c"),
        (5, "ev._ok"),
        (7, "a._e"),
    ]
    assert simpy_private_uses(tree) == [(5, "ev._ok"), (6, "env._queue")]


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_writes_another_objects_private_field(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    allowed = path.name == "simpy_internals.py"  # sets a SimPy event's own state
    found = [] if allowed else foreign_private_assignments(tree)
    assert not found, f"{path.relative_to(REPO)} assigns: {found}"


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_simpy_internals_stay_in_their_module(path: Path) -> None:
    if path.name == "simpy_internals.py":
        return
    found = simpy_private_uses(ast.parse(path.read_text(), filename=str(path)))
    assert not found, f"{path.relative_to(REPO)} uses SimPy internals: {found}"
