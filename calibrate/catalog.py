"""The bundled hardware and model catalog, and loading user-supplied entries.

GPUs live in ``calibrate/catalog/gpus/*.yaml`` (strict: unknown keys are an error);
models in ``calibrate/catalog/models/*.json``, which are subsets of the models' published
Hugging Face ``config.json`` files (unknown keys are ignored, as with any ``config.json``).
``load_gpu`` / ``load_model`` take a catalog name (case-insensitive; for models an
``org/`` prefix is dropped) or a path to a GPU YAML file / a ``config.json`` (or the
folder holding one). Every failure raises ``CatalogError`` naming the file and field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from calibrate import yaml_load
from calibrate.gpu_spec import GPUSpec
from calibrate.hf_config import model_spec_from_hf_config
from calibrate.model_spec import ModelSpec

CATALOG_DIR = Path(__file__).resolve().parent / "catalog"
GPU_DIR = CATALOG_DIR / "gpus"
MODEL_DIR = CATALOG_DIR / "models"


class CatalogError(ValueError):
    """A catalog entry or user-supplied GPU/model file is missing or invalid."""


def _format_validation(error: ValidationError, source: str) -> str:
    parts = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "(top level)"
        parts.append(f"field '{field}': {item['msg']}")
    return f"{source}: " + "; ".join(parts)


def _gpu_files() -> dict[str, Path]:
    """``{lowercase name: path}`` of the bundled GPU YAML files (name from the file)."""
    out = {}
    for path in sorted(GPU_DIR.glob("*.yaml")):
        out[_read_gpu_file(path).name.lower()] = path
    return out


def _model_files() -> dict[str, Path]:
    """``{lowercase name: path}`` of the bundled model configs (name = file stem)."""
    return {p.stem.lower(): p for p in sorted(MODEL_DIR.glob("*.json"))}


def list_gpus() -> list[str]:
    """Names of the bundled GPUs."""
    return sorted(_read_gpu_file(p).name for p in GPU_DIR.glob("*.yaml"))


def list_models() -> list[str]:
    """Names of the bundled models."""
    return sorted(p.stem for p in MODEL_DIR.glob("*.json"))


def _read_gpu_file(path: Path) -> GPUSpec:
    try:
        data = yaml_load.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{path}: cannot read GPU file ({exc})") from None
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise CatalogError(f"{path}: a GPU file must be a YAML mapping of fields")
    try:
        return GPUSpec.model_validate(data)
    except ValidationError as exc:
        raise CatalogError(_format_validation(exc, str(path))) from None


def _read_model_file(path: Path, name: str | None = None) -> ModelSpec:
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{path}: cannot read model config ({exc})") from None
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise CatalogError(f"{path}: a config.json must be a JSON object")
    if name is None:
        name = str(raw.get("_name_or_path") or "").split("/")[-1] or (
            path.parent.name if path.name == "config.json" else path.stem
        )
    try:
        return model_spec_from_hf_config(raw, name)
    except ValidationError as exc:
        raise CatalogError(_format_validation(exc, str(path))) from None
    except ValueError as exc:
        raise CatalogError(f"{path}: {exc}") from None


def _looks_like_path(value: str, suffixes: tuple[str, ...]) -> bool:
    """A file name (by suffix) or a path with folders; ``org/name`` is a model id."""
    return (
        value.lower().endswith(suffixes)
        or value.count("/") > 1
        or "\\" in value
        or value.startswith((".", "/", "~"))
    )


def load_gpu(name_or_path: str | Path) -> GPUSpec:
    """A GPU by catalog name (case-insensitive) or from a GPU YAML file."""
    value = str(name_or_path)
    path = Path(value).expanduser()
    if path.is_file():
        return _read_gpu_file(path)
    files = _gpu_files()
    if value.lower() in files:
        return _read_gpu_file(files[value.lower()])
    if _looks_like_path(value, (".yaml", ".yml")):
        raise CatalogError(f"gpu: file {value} not found")
    raise CatalogError(f"gpu: unknown GPU {value!r}; known: {', '.join(list_gpus())}")


def load_model(name_or_path: str | Path) -> ModelSpec:
    """A model by catalog name (case-insensitive, ``org/`` prefix optional) or from a
    Hugging Face ``config.json`` (or a folder holding one)."""
    value = str(name_or_path)
    path = Path(value).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    if path.is_file():
        return _read_model_file(path)
    files = _model_files()
    for key in (value.lower(), value.lower().split("/")[-1]):
        if key in files:
            return _read_model_file(files[key], files[key].stem)
    if _looks_like_path(value, (".json",)):
        raise CatalogError(f"model: file {value} not found")
    raise CatalogError(
        f"model: unknown model {value!r} (not a catalog name or a config.json path); "
        f"known: {', '.join(list_models())}"
    )
