"""What ``kvsim recommend`` costs, and whether its answer holds: the bundled example
(Llama-3.1-70B, chat, TTFT p90 <= 1 s and TPOT p99 <= 60 ms at 50 req/s) from a cold
directory, then the top candidate as a whole cluster at the target rate for a long run,
with its replicas and with one fewer.

Printed: the recommend run's wall time (a fresh ``python -m sim.cli recommend``
process) and its candidates simulated vs pruned (by configuration, by zero-load SLO,
by bound), the ranking, and for the long checks each SLO's window figure and whether it
passed. The done-when of the recommend work: the top candidate meets the SLOs, one
replica fewer does not.

Usage (from the repo root; about 15 minutes on two CPU cores)::

    .venv/bin/python tests/bench/bench_recommend.py
    .venv/bin/python tests/bench/bench_recommend.py --spec my.yaml --long-requests 40000 --jobs 8
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def _recommend(spec: Path, out: Path, jobs: int | None) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "sim.cli", "recommend", str(spec), "--out", str(out)]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"recommend failed ({res.returncode}):\n{res.stderr[-3000:]}")
    print(res.stdout)
    return wall, json.loads((out / "recommend.json").read_text())


def _long_check(doc: dict, out: Path, replicas: int, num_requests: int) -> dict:
    """The top candidate with ``replicas`` replicas at the target rate, one long run."""
    from sim.app.engine_config import EngineConfig
    from sim.app.run import RunSpec, run
    from sim.plan.judge import judge_summary
    from sim.plan.length import Length
    from sim.recommend.verify import cluster_workload
    from workloads.loader import load_spec, preset_path

    top = next(c for c in doc["candidates"] if c["key"] == doc["chosen"])
    spec = doc["spec"]
    path = preset_path(spec["workload"]) or Path(spec["workload"])
    base = load_spec(path, spec["workload"])
    workload = out / f"long-x{replicas}.yaml"
    workload.write_text(cluster_workload(base, path.stem, float(doc["target_rate"]), num_requests))
    engine = {k: v for k, v in top["engine"].items()}
    summary = run(
        RunSpec(
            workload=str(workload),
            model=spec["model"],
            gpu=top["gpu"],
            engine=EngineConfig.model_validate(engine),
            seed=0,
            num_replicas=replicas,
            router=spec["router"],
        ),
        out / f"long-x{replicas}",
        render=False,
    )
    # At the plan's longest run: undecided runs are judged with its drift margin.
    return judge_summary(summary, doc["slo"], Length().precision)


def _show(label: str, judged: dict, slo: dict) -> None:
    state = "meets the SLOs" if judged["passed"] else "fails: " + "; ".join(judged["failures"])
    metrics = judged.get("metrics") or {}
    figures = ", ".join(f"{k} {metrics[k]:.4g} (<= {v:g})" for k, v in slo.items() if k in metrics)
    print(f"{label}: {judged['state']}, {figures or 'no latency figures (not steady)'}; {state}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=REPO / "examples" / "recommend.yaml")
    parser.add_argument("--jobs", type=int, default=None, help="recommend --jobs")
    parser.add_argument(
        "--long-requests", type=int, default=30_000, help="requests of each long check"
    )
    parser.add_argument("--out", type=Path, default=None, help="keep the directory here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "rec"
        wall, doc = _recommend(args.spec.resolve(), out, args.jobs)
        c = doc["counts"]
        pruned = c["configuration"] + c["infeasible"] + c["pruned"]
        print(
            f"recommend: wall {wall:.1f} s; {c['candidates']} candidates: {c['simulated']} "
            f"simulated, {pruned} pruned ({c['configuration']} do not start, "
            f"{c['infeasible']} infeasible at zero load, {c['pruned']} by bound); "
            f"{c['cluster_checks']} cluster checks"
        )
        if doc["chosen"] is None:
            sys.exit("no candidate met the SLOs")
        top = next(x for x in doc["candidates"] if x["key"] == doc["chosen"])
        replicas = top["replicas"]
        print(
            f"top: {top['key']} x{replicas} ({top['gpus']} GPUs, "
            f"{top['cost_per_hour']} USD/h), {top['rate']:.4g} req/s per replica"
        )
        long_dir = out / "long"
        long_dir.mkdir(parents=True, exist_ok=True)
        _show(
            f"long check x{replicas} ({args.long_requests} requests)",
            _long_check(doc, long_dir, replicas, args.long_requests),
            doc["slo"],
        )
        if replicas > 1:
            _show(
                f"long check x{replicas - 1} ({args.long_requests} requests)",
                _long_check(doc, long_dir, replicas - 1, args.long_requests),
                doc["slo"],
            )


if __name__ == "__main__":
    main()
