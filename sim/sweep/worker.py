"""Run one sweep point in a worker process (local pool or Ray task).

A point whose verdict is ``undecided`` (``sim.records.verdict``: the engine still filling its
batch, or saturating slowly) runs again twice as long with the same seed, up to the
sweep's ``length.max_factor``; its directory keeps the last run (``config.yaml`` says
its length).

A point either completes as a full run directory (``sim.app.run.run`` writes it under a
temporary name and renames it into place) or ends in a directory holding only
``error.json`` (the simulation got stuck or served nothing; both are deterministic, so a
rerun does not retry them). Anything else is an internal error: nothing is written and
the exception propagates, so a rerun retries the point.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import yaml

from sim.app.engine_config import load_engine_config
from sim.app.outdir import check_output, discard, publish, staging_dir
from sim.app.run import NothingServed, RunSpec, run
from sim.errors import SimulationStuck
from sim.records.verdict import UNDECIDED
from workloads.loader import YAML_SUFFIXES, load_spec, preset_path
from workloads.overrides import WorkloadOverrides, override_spec

ERROR_FILE = "error.json"


def make_run_spec(run_kwargs: dict[str, Any], workload_path: str | Path | None) -> RunSpec:
    """A ``RunSpec`` from a point's run mapping (``engine`` as a mapping)."""
    kwargs = dict(run_kwargs)
    kwargs["engine"] = load_engine_config(None, kwargs.get("engine") or {})
    if workload_path is not None:
        kwargs["workload"] = str(workload_path)
    return RunSpec(**kwargs)


def write_failure(out: Path, status: str, message: str) -> None:
    """Write ``out/error.json`` as a whole run directory renamed into place."""
    target = check_output(out, "run")
    tmp = staging_dir(target)
    try:
        (tmp / ERROR_FILE).write_text(
            json.dumps({"status": status, "error": message}, indent=2) + "\n"
        )
        publish(tmp, target)
    except BaseException:
        discard(tmp)
        raise


def _lengthened(workload: str, factor: int, scratch: Path) -> Path | None:
    """The workload ``workload`` (preset or YAML spec) ``factor`` times as long, written
    under ``scratch``; None for a trace (its length is the trace's) or a staged workload
    (its stages give its length)."""
    path = preset_path(workload) or Path(workload)
    if path.suffix.lower() not in YAML_SUFFIXES:
        return None
    spec = load_spec(path, workload)
    if spec.stages is not None:
        return None
    if spec.num_requests is not None:
        longer = WorkloadOverrides(num_requests=spec.num_requests * factor)
    else:
        longer = WorkloadOverrides(duration_s=float(spec.duration_s) * factor)
    data = override_spec(spec, longer, workload).model_dump(mode="json", exclude_none=True)
    target = scratch / f"workload-x{factor}.yaml"
    target.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


class _Scratch:
    """A point's temporary directory, made on first use and removed by :meth:`close`.
    Most points need none (their workload file is on this machine and their verdict is
    decided): a worker killed outright in one then leaves nothing behind."""

    def __init__(self) -> None:
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    def path(self) -> Path:
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="kvsim-point-")
        return Path(self._dir.name)

    def close(self) -> None:
        if self._dir is not None:
            self._dir.cleanup()


def run_point(payload: dict[str, Any]) -> str:
    """Run one point into ``payload["out"]``; return its status (``ok``, ``stuck``,
    ``rejected``, ``invalid``).

    ``payload``: ``run`` (RunSpec keyword arguments), ``out`` (the point directory),
    ``workload_path`` and ``workload_yaml`` (an edited workload, or both ``None``),
    ``max_length_factor``: a run whose verdict is ``undecided`` runs again twice as
    long (same seed) up to this many times its length (the directory keeps the last).
    """
    out = Path(payload["out"])
    workload_path = payload.get("workload_path")
    max_factor = int(payload.get("max_length_factor", 1))
    with contextlib.closing(_Scratch()) as scratch:
        if workload_path is not None and not Path(workload_path).is_file():
            # A worker on another machine: the sweep directory is not shared.
            workload_path = scratch.path() / Path(workload_path).name
            workload_path.write_text(payload["workload_yaml"])
        spec = make_run_spec(payload["run"], workload_path)
        base_workload = spec.workload
        factor = 1
        try:
            while True:
                # Sweep workers already keep every CPU busy: no helper processes.
                summary = run(spec, out, helpers=False)
                if summary["verdict"]["state"] != UNDECIDED or factor * 2 > max_factor:
                    break
                factor *= 2
                longer = _lengthened(base_workload, factor, scratch.path())
                if longer is None:
                    break
                spec = dataclasses.replace(spec, workload=str(longer))
        except SimulationStuck as e:
            write_failure(out, "stuck", str(e))
            return "stuck"
        except NothingServed as e:
            write_failure(out, "rejected", str(e))
            return "rejected"
        except ValueError as e:
            write_failure(out, "invalid", str(e))
            return "invalid"
    return "ok"


def run_point_packed(payload: dict[str, Any]) -> tuple[str, bytes]:
    """Run one point in a scratch directory; return its status and the directory as a
    gzip'd tar (for Ray workers whose disk the driver cannot see)."""
    with tempfile.TemporaryDirectory(prefix="kvsim-ray-point-") as scratch:
        out = Path(scratch) / "point"
        status = run_point({**payload, "out": str(out)})
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(out, arcname="point")
        return status, buf.getvalue()


def unpack_point(data: bytes, out: Path) -> None:
    """Extract a packed point directory to ``out`` via a temporary name and a rename."""
    target = check_output(out, "run")
    tmp = staging_dir(target)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")
            else:  # pragma: no cover - Python < 3.10.12
                tar.extractall(tmp)  # noqa: S202 - our own archive, made by run_point_packed
        src = tmp / "point"
        src.chmod(0o755)
        publish(src, target)
    finally:
        discard(tmp)
