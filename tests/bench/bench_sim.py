"""Speed of ``kvsim run``'s simulation: 10,000 chat requests, Llama-3.1-8B on H100-SXM.

The bundled ``chat`` preset is copied with ``num_requests`` raised to 10,000 (its seed,
arrivals and lengths unchanged) and simulated on the default roofline latency model and
KV budget, as ``kvsim run chat`` does. Timed: ``sim.app.run.simulate`` alone (the SimPy
engine, kvcore's scheduler, the streamed CSV records and the summary), best of
``--repeats`` runs, in wall-clock seconds; configuration resolution, plots and the
report are left out. Printed: simulated requests per wall-second, engine steps per
wall-second, and peak memory (``ru_maxrss`` of the process, before and after; with
``--tracemalloc`` an extra, slower run reports the Python heap's peak).

Usage (from the repo root)::

    .venv/bin/python tests/bench/bench_sim.py                 # needs >= 1000 req/s
    .venv/bin/python tests/bench/bench_sim.py --min-rps 500 --repeats 3 --tracemalloc

Exit status 1 when the best run is below ``--min-rps`` simulated requests per second.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sim.app.run import RunSpec, simulate  # noqa: E402
from sim.app.setup import resolve_run  # noqa: E402
from workloads.loader import PRESET_DIR  # noqa: E402


def _maxrss_mib() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def chat_workload(tmp: Path, num_requests: int) -> Path:
    """The bundled chat preset with ``num_requests`` requests, written under ``tmp``."""
    data = yaml.safe_load((PRESET_DIR / "chat.yaml").read_text())
    data["num_requests"] = num_requests
    path = tmp / "chat_bench.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _one_run(workload: Path, out: Path, model: str, gpu: str) -> tuple[float, dict]:
    resolved = resolve_run(RunSpec(workload=str(workload), model=model, gpu=gpu))
    out.mkdir(parents=True, exist_ok=True)
    gc.collect()
    t0 = time.perf_counter()
    summary = simulate(resolved, out)
    return time.perf_counter() - t0, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-requests", type=int, default=10_000)
    parser.add_argument(
        "--min-rps",
        type=float,
        default=1000.0,
        help="fail below this many simulated requests per wall-second",
    )
    parser.add_argument("--repeats", type=int, default=1, help="timed runs; the best counts")
    parser.add_argument("--model", default="Llama-3.1-8B")
    parser.add_argument("--gpu", default="H100-SXM")
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="one more (slower) run measuring the Python heap's peak",
    )
    args = parser.parse_args(argv)

    rss_before = _maxrss_mib()
    with tempfile.TemporaryDirectory(prefix="bench_sim_") as tmp_name:
        tmp = Path(tmp_name)
        workload = chat_workload(tmp, args.num_requests)
        best = None
        for i in range(args.repeats):
            wall, summary = _one_run(workload, tmp / f"run{i}", args.model, args.gpu)
            print(
                f"run {i + 1}: {wall:.2f} s wall, {summary['num_finished']:,} requests, "
                f"{summary['num_steps']:,} steps, {summary['sim_duration_s']:.1f} s simulated"
            )
            if best is None or wall < best[0]:
                best = (wall, summary)
        rss_after = _maxrss_mib()
        heap_peak = None
        if args.tracemalloc:
            tracemalloc.start()
            _one_run(workload, tmp / "traced", args.model, args.gpu)
            heap_peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()

    assert best is not None
    wall, summary = best
    rps = summary["num_finished"] / wall
    steps_ps = summary["num_steps"] / wall
    print(f"workload: chat x {args.num_requests:,} on {args.model} / {args.gpu} (roofline)")
    print(f"simulated requests per wall-second: {rps:,.0f}")
    print(f"engine steps per wall-second:       {steps_ps:,.0f}")
    print(f"simulated seconds per wall-second:  {summary['sim_duration_s'] / wall:,.1f}")
    print(f"peak RSS: {rss_after:,.0f} MiB (before the runs: {rss_before:,.0f} MiB)")
    if heap_peak is not None:
        print(f"peak Python heap during one simulation (tracemalloc): {heap_peak:,.1f} MiB")
    if summary["num_finished"] != args.num_requests:
        print(f"FAIL: {summary['num_finished']} of {args.num_requests} requests finished")
        return 1
    if rps < args.min_rps:
        print(f"FAIL: {rps:,.0f} simulated requests per second < --min-rps {args.min_rps:,.0f}")
        return 1
    print(f"OK: >= {args.min_rps:,.0f} simulated requests per second")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
