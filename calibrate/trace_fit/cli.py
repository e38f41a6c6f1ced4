"""Body of ``kvsim calibrate --from-trace``: fit, print, write (exit 0/2)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from calibrate.efficiency_file import (
    EfficiencyCalibration,
    FittedOn,
    is_efficiency_file,
    sha256_of,
    write_efficiency,
)
from calibrate.harness.output_files import write_atomically
from calibrate.roofline_terms import PARAMETERS
from calibrate.trace_fit.bench_log import detailed_requests, write_trace
from calibrate.trace_fit.fit import Measured, TraceFit, fit_trace
from calibrate.trace_fit.runs_file import FitRun, default_router, is_runs_file, load_runs
from sim.app.engine_config import load_engine_config
from sim.app.run import RunSpec
from sim.app.setup import resolve_run
from sim.interop.real import read_real

ERROR_ROWS = (("ttft_mean", "TTFT mean"), ("tpot_mean", "TPOT mean"), ("e2e_mean", "E2E mean"))


def _fail(message: str) -> int:
    print(f"kvsim: error: {message}", file=sys.stderr)
    return 2


def load_measured(path: str, workdir: Path) -> tuple[Measured, Path]:
    """``(engine-side times, the trace to replay)`` of a real run: an LLMServingSim run
    directory or ``requests.jsonl`` (queued, first-token and last-token timestamps; the
    log itself is the trace), or a ``vllm bench serve --save-detailed`` result
    (client-side times less the API server's costs; its requests written as a trace in
    ``workdir``: :mod:`calibrate.trace_fit.bench_log`)."""
    path = str(_trace_file(path))
    real = read_real(path)
    if real.kind == "vllm-bench":
        measured, records = detailed_requests(real.data, path)
        return measured, write_trace(records, workdir / f"{Path(path).stem}.trace.jsonl")
    if real.kind != "llmservingsim":
        raise ValueError(
            f"--from-trace {path}: a {real.kind} result holds no per-request times; give a "
            "request log (LLMServingSim's requests.jsonl) or a vllm bench serve result "
            "saved with --save-detailed"
        )
    d = real.data
    measured = Measured(
        d["request_id"], d["start_s"], d["first_token_s"], d["finish_s"], d["output_tokens"]
    )
    return measured, Path(path)


def measured_requests(path: str) -> Measured:
    """Per-request engine-side times of an LLMServingSim request log (see
    :func:`load_measured`)."""
    with tempfile.TemporaryDirectory() as tmp:
        return load_measured(path, Path(tmp))[0]


def _trace_file(path: str | Path) -> Path:
    p = Path(path)
    return p / "requests.jsonl" if p.is_dir() else p


def _tables(fit: TraceFit, runs: list[FitRun]) -> list[Table]:
    factors = Table(title="roofline efficiency factors (prior: kvsim's generic defaults)")
    factors.add_column("factor")
    factors.add_column("prior", justify="right")
    factors.add_column("fitted", justify="right")
    factors.add_column("set by the runs", justify="right")
    for name in PARAMETERS:
        share = fit.data_share.get(name)
        factors.add_row(
            name,
            f"{getattr(fit.prior, name):.4g}",
            f"{getattr(fit.efficiency, name):.4g}",
            "" if share is None else f"{100 * share:.0f}%",
        )
    err = Table(title="replay against each measured run (signed error of the mean)")
    err.add_column("run")
    err.add_column("metric")
    err.add_column("prior", justify="right")
    err.add_column("fitted", justify="right")
    for run, before, after in zip(runs, fit.prior_errors, fit.errors):
        for key, label in ERROR_ROWS:
            err.add_row(
                run.trace.parent.name if key == "ttft_mean" else "",
                label,
                f"{100 * before[key]:+.1f}%",
                f"{100 * after[key]:+.1f}%",
            )
    return [factors, err]


UNDECIDED = 0.1
"""A factor whose data share is below this (the prior holds over 90% of what is known of
it) is reported as set by the prior."""


def undecided_note(fit: TraceFit) -> str | None:
    """A line naming the factors the runs left mostly to the prior (data share below
    :data:`UNDECIDED`), or None when the runs decided every factor."""
    names = [n for n in PARAMETERS if fit.data_share.get(n, 1.0) < UNDECIDED]
    if not names:
        return None
    return (
        f"set by the prior, not by these runs: {', '.join(names)} (no run exercises "
        "them, or a factor held more loosely has a term of the same shape in every step; "
        "a run of another model or parallel layout on this GPU tells them apart)"
    )


def fit_runs(
    trace: str, model: str, tp: int, engine_file: str | None, engine_overrides: dict[str, Any]
) -> list[FitRun]:
    """The runs ``--from-trace`` names: a runs file's, or the one request log with the
    command line's model and engine."""
    if is_runs_file(trace):
        return load_runs(trace)
    engine = load_engine_config(engine_file, engine_overrides, {"tensor_parallel_size": tp})
    dp = engine.data_parallel_size
    return [FitRun(_trace_file(trace), model, engine, dp, default_router(dp))]


def fit_efficiency(
    runs: list[FitRun], gpu: str, version: str
) -> tuple[TraceFit, EfficiencyCalibration]:
    """Fit ``gpu``'s factors to the measured ``runs``; the fit and the efficiency file's
    content (each run with its trace's sha256, model, engine and errors)."""
    with tempfile.TemporaryDirectory(prefix="kvsim-fit-") as tmp:
        pairs, resolved = [], []
        for run in runs:
            measured, replayed = load_measured(str(run.trace), Path(tmp))
            spec = RunSpec(
                workload=str(replayed), model=run.model, gpu=gpu, engine=run.engine,
                num_replicas=run.num_replicas, router=run.router,
            )  # fmt: skip
            resolved.append(resolve_run(spec))
            pairs.append((spec, measured))
        fit = fit_trace(pairs)
    cal = EfficiencyCalibration(
        kvsim_version=version,
        gpu=resolved[0].latency_model.gpu,
        efficiency={n: float(getattr(fit.efficiency, n)) for n in PARAMETERS},
        prior={n: float(getattr(fit.prior, n)) for n in PARAMETERS},
        fitted_on=[
            FittedOn(
                trace=str(run.trace),
                sha256=sha256_of(run.trace),
                model=res.model_name,
                tensor_parallel_size=run.engine.tensor_parallel_size,
                engine=run.engine.model_dump(exclude_none=True),
                num_replicas=run.num_replicas,
                router=run.router,
                num_requests=len(m.request_id),
                errors={"prior": before, "fitted": after},
            )
            for run, res, (_, m), before, after in zip(
                runs, resolved, pairs, fit.prior_errors, fit.errors
            )
        ],
        iterations=[
            {**{n: float(getattr(it.efficiency, n)) for n in PARAMETERS}, "objective": it.objective}
            for it in fit.iterations
        ],
        data_share=fit.data_share,
    )
    return fit, cal


def from_trace_command(
    trace: str,
    model: str,
    gpu: str,
    tp: int,
    engine_file: str | None,
    engine_overrides: dict[str, Any],
    out: str | None,
    force: bool,
    version: str,
) -> int:
    """Run ``kvsim calibrate --from-trace``; return the exit status."""
    out_path = Path(out) if out else Path(f"efficiency-{Path(gpu).stem.lower()}.yaml")
    if out_path.is_dir():
        return _fail(f"--out {out_path}: is a directory; name a file")
    if out_path.exists() and not force and not is_efficiency_file(out_path):
        return _fail(
            f"--out {out_path}: exists and was not written by kvsim calibrate --from-trace; "
            "name another file or pass --force to replace it"
        )
    try:
        runs = fit_runs(trace, model, tp, engine_file, engine_overrides)
        fit, cal = fit_efficiency(runs, gpu, version)
    except ValueError as exc:
        return _fail(str(exc))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out_path, lambda tmp: write_efficiency(cal, tmp))
    console = Console()
    for table in _tables(fit, runs):
        console.print(table)
    note = undecided_note(fit)
    if note:
        console.print(note)
    console.print(f"wrote {out_path}")
    return 0
