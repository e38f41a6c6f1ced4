"""``load_workload``: a preset name, a YAML spec or a trace file -> a ``Workload``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml
from pydantic import ValidationError

from workloads.errors import WorkloadError, from_validation_error, yaml_problem
from workloads.overrides import WorkloadOverrides, override_spec, override_trace
from workloads.process import Workload
from workloads.spec import WorkloadSpec
from workloads.staged import StagedWorkload
from workloads.synthetic import SyntheticWorkload
from workloads.trace_workload import TraceWorkload
from workloads.traces.detect import TRACE_SUFFIXES, read_trace
from workloads.traces.table import TraceTable

PRESET_DIR = Path(__file__).parent / "presets"
YAML_SUFFIXES = (".yaml", ".yml")


def list_presets() -> list[str]:
    """Names of the bundled presets (``workloads/presets/<name>.yaml``), sorted."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def preset_description(name: str) -> str:
    """The ``description`` of a bundled preset."""
    return load_spec(PRESET_DIR / f"{name}.yaml", f"{name}.yaml").description


def load_spec(path: Path, file: str | None = None) -> WorkloadSpec:
    """Read and validate a YAML workload spec (safe loading); errors name ``file``."""
    file = file or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(file, "", f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise WorkloadError(file, "", "not UTF-8 text; a workload spec is a YAML file") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WorkloadError(file, *yaml_problem(exc)) from None
    if not isinstance(data, dict):
        raise WorkloadError(file, "", "a workload spec must be a YAML mapping of keys to values")
    try:
        return WorkloadSpec.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, file, WorkloadSpec) from None


def workload_from_spec(
    spec: WorkloadSpec,
    name: str,
    base_dir: Path | str,
    file: str,
    source: str,
    overrides: dict[str, float | int] | None = None,
) -> SyntheticWorkload:
    """A synthetic workload from a validated spec (``base_dir`` for empirical files);
    ``overrides`` (what :meth:`WorkloadOverrides.given` returns) are recorded in the
    resolved configuration when there are any."""
    resolved = {"name": name, **spec.model_dump(mode="json", exclude={"name"}), "source": source}
    if overrides:
        resolved["overrides"] = dict(overrides)
    staged = spec.stages is not None or spec.prompt_pool is not None
    cls = StagedWorkload if staged else SyntheticWorkload
    return cls(spec, name, base_dir, file, resolved)


def preset_path(text: str) -> Path | None:
    """The spec file of preset ``text`` when ``text`` names one (a bare name, no
    suffix or slash), else None: ``text`` is then a path."""
    preset = PRESET_DIR / f"{text}.yaml"
    if Path(text).suffix == "" and "/" not in text and preset.is_file():
        return preset
    return None


def load_workload(
    spec: str | Path,
    *,
    seed: int | None = None,
    overrides: WorkloadOverrides | None = None,
    read: Callable[[Path, str], TraceTable] = read_trace,
) -> Workload:
    """Load a workload from a preset name, a YAML spec path or a trace path.

    Args:
        spec: a preset name (see ``list_presets``), a ``.yaml``/``.yml`` spec, or a trace
            (``.jsonl`` kvsim or Mooncake, ``.csv`` Azure or BurstGPT, told apart by
            their fields or header).
        seed: overrides the spec's ``seed`` (traces: seeds the drawn token ids; default 0).
        overrides: a rate and length replacing the workload's own
            (:mod:`workloads.overrides`); the resolved configuration records them under
            ``overrides``.
        read: reads a trace: ``read(path, label)`` is ``read_trace``'s result (``kvsim
            run`` passes one that may have read it ahead in a helper process).

    Raises:
        WorkloadError: one line naming the file and the field.
    """
    text = str(spec)
    if seed is not None and seed < 0:
        raise WorkloadError(text, "seed", f"must be >= 0 (got {seed})")
    path = Path(text)
    preset = preset_path(text)
    if preset is not None:
        path, file, source = preset, f"{text}.yaml", f"preset:{text}"
    elif path.is_file():
        file, source = text, text
    else:
        raise WorkloadError(
            text,
            "",
            "no such preset or file (presets: " + ", ".join(list_presets()) + ")",
        )
    suffix = path.suffix.lower()
    given = overrides.given() if overrides is not None else {}
    if suffix in YAML_SUFFIXES:
        parsed = load_spec(path, file)
        if seed is not None:
            parsed = parsed.model_copy(update={"seed": seed})
        if overrides is not None:
            parsed = override_spec(parsed, overrides, file)
        name = parsed.name or path.stem
        return workload_from_spec(parsed, name, path.parent, file, source, given)
    if suffix in TRACE_SUFFIXES:
        table = read(path, file)
        if overrides is not None:
            table = override_trace(table, overrides, file)
        return TraceWorkload(table, path.stem, source, seed=seed or 0, overrides=given)
    raise WorkloadError(
        file,
        "",
        f"unknown workload file type {suffix!r} "
        f"(allowed: {', '.join(YAML_SUFFIXES + TRACE_SUFFIXES)} or a preset name)",
    )
