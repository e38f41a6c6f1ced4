"""The project's pydantic models build their validators when first used
(``defer_build``): a command imports many models and validates few (``kvsim run`` on
a trace: 6 of 39), and building them all at import took about 28 ms of its start-up."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kvcore", "workloads", "sim", "calibrate", "reports")


def _model_classes() -> list[tuple[str, ast.ClassDef]]:
    """Every class in the project that subclasses ``BaseModel`` itself."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and b.id == "BaseModel" for b in node.bases
                ):
                    found.append((f"{path.relative_to(ROOT)}:{node.name}", node))
    return found


MODELS = _model_classes()


def _config_keywords(node: ast.ClassDef) -> dict[str, ast.expr] | None:
    for stmt in node.body:
        if (
            isinstance(stmt, ast.Assign)
            and [t.id for t in stmt.targets if isinstance(t, ast.Name)] == ["model_config"]
            and isinstance(stmt.value, ast.Call)
        ):
            return {k.arg: k.value for k in stmt.value.keywords if k.arg is not None}
    return None


def test_the_walk_finds_the_models() -> None:
    names = {name.rpartition(":")[2] for name, _ in MODELS}
    assert {"EngineConfig", "GPUSpec", "ModelSpec", "KvsimLine"} <= names


@pytest.mark.parametrize(("name", "node"), MODELS, ids=[name for name, _ in MODELS])
def test_every_model_defers_its_build(name: str, node: ast.ClassDef) -> None:
    keywords = _config_keywords(node)
    assert keywords is not None, f"{name}: no model_config = ConfigDict(...)"
    flag = keywords.get("defer_build")
    assert isinstance(flag, ast.Constant) and flag.value is True, name


def test_a_deferred_model_validates_as_before() -> None:
    """Deferred, a model still refuses what it refused (first use builds it)."""
    from pydantic import ValidationError

    from sim.app.engine_config import EngineConfig

    assert EngineConfig.model_config.get("defer_build") is True
    with pytest.raises(ValidationError, match="block_size"):
        EngineConfig(block_size="16")  # strict: no string for an int
    assert EngineConfig(block_size=32).block_size == 32
