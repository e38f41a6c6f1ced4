"""Replay the four public real vLLM runs with kvsim's defaults and with step-time factors
fitted to other runs of the same GPU; print signed errors per run and their medians.

    python scripts/validate_serving.py [--json]

Rows: ``default`` (what ``kvsim run`` uses: the factors the catalog ships for the GPU,
``calibrate/catalog/efficiency/``, fitted on that GPU's one-replica runs here, so
in-sample for those); ``generic`` (the A100-fitted factors a GPU without a shipped fit
gets); ``fit: all`` (one fit on every run of that GPU, the run itself included:
in-sample); ``fit: others`` (a fit on the GPU's other runs: the run is held out); ``fit:
RUN`` (a fit on that one other run alone: what ``kvsim calibrate --from-trace`` on one
run carries to another model or TP size). Fitted rows also print the link and custom
all-reduce factors the fit learnt. The RTX 4090 has one run only, so it has no held-out
rows. About two minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from calibrate.efficiency_file import write_efficiency  # noqa: E402
from calibrate.roofline import RooflineEfficiency  # noqa: E402
from calibrate.trace_fit.cli import fit_efficiency  # noqa: E402
from calibrate.trace_fit.runs_file import FitRun  # noqa: E402
from sim.validate.serving import DATA, METRICS, RUNS, ServingRun, replay_run  # noqa: E402


def _fit_file(runs: list[ServingRun], path: Path) -> dict[str, float]:
    """Fit the runs' GPU as ``kvsim calibrate --from-trace RUNS.yaml`` would; write the
    efficiency file to ``path``; return the link and all-reduce factors it fitted."""
    fit_on = [
        FitRun(DATA / r.name / "requests.jsonl", r.model, r.engine, r.num_replicas, r.router)
        for r in runs
    ]
    _, cal = fit_efficiency(fit_on, runs[0].gpu, "validation")
    write_efficiency(cal, path)
    eff = cal.factors()
    return {"interconnect": eff.interconnect, "custom_allreduce_scale": eff.custom_allreduce_scale}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    fitted: dict[tuple[str, ...], tuple[Path, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:

        def fit_file(fit_on: list[ServingRun]) -> tuple[Path, dict[str, float]]:
            key = tuple(r.name for r in fit_on)
            if key not in fitted:
                path = Path(tmp) / f"fit-{len(fitted)}.yaml"
                fitted[key] = (path, _fit_file(fit_on, path))
            return fitted[key]

        for run in RUNS:
            rows.append({"run": run.name, "row": "default", **replay_run(run, DATA)})
            generic = replay_run(run, DATA, efficiency=RooflineEfficiency())
            rows.append({"run": run.name, "row": "generic", **generic})
            same = [r for r in RUNS if r.gpu == run.gpu]
            others = [r for r in same if r is not run]
            fits = [("fit: all", same)]
            fits += [("fit: others", others)] if len(others) > 1 else []
            fits += [(f"fit: {r.name}", [r]) for r in others]
            for label, fit_on in fits:
                path, factors = fit_file(fit_on)
                row = {"run": run.name, "row": label, **replay_run(run, DATA, str(path))}
                rows.append({**row, "factors": factors})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'run':40} {'row':45} " + " ".join(f"{m:>10}" for m in METRICS))
    for r in rows:
        line = f"{r['run']:40} {r['row']:45} " + " ".join(f"{100 * r[m]:+9.1f}%" for m in METRICS)
        if "factors" in r:  # what the fit learnt of the link and the custom all-reduce
            line += "  " + " ".join(f"{k}={v:.3g}" for k, v in r["factors"].items())
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
