"""Fast-forward benchmarks (issue 7), each printed with fast-forward on and off, for
the synchronous engine loop and for async scheduling, vLLM 0.33.0's default loop
(``--loops``: ``sync``, ``async`` or ``both``, the default; the async lines' ratios
are against the async FF-on run and the synchronous FF-on run).

(a) 20,000 requests, Poisson 4 req/s, prompt 512, output 128, Llama-3.1-8B on
    A100-80GB: process wall time including start-up (imports, configuration), the
    simulation alone, and the off/on ratio. Target: <= 2.4 s wall with fast-forward.
(b) the same at 12 and 24 req/s.
(c) heavy load: the requests all queued at t = 0 (arrival ``burst``), max_num_seqs
    128: engine steps per wall-second.
(d) ``--million``: 1,000,000 ``chat`` requests: wall time and peak RSS (target < 2 GB).
(e) two replicas (round robin), the workload of (a) at 8 req/s.

Each run is a fresh ``python`` process (``--child``) so start-up and peak RSS are the
run's own; each figure is the median of ``--repeat`` runs (3; wall times on these
shared 2-core machines vary by about 10% from run to run), with their range; records
go to a temporary directory; plots and the HTML report are skipped.
kvsim's modules are byte-compiled first (``compileall``), as an installed package or a
second run would find them: with ``PYTHONDONTWRITEBYTECODE`` set, every child would
otherwise compile the sources again (~0.05 s of start-up).

Where the machine has a spare CPU, a run formats ``steps.csv`` and draws an open-loop
workload in helper processes (:mod:`sim.offload`); their CPU time is printed apart
("helpers cpu"); ``KVSIM_HELPERS=0`` (passed to the children) runs all in one process.

The children run whichever build of the hot modules is current (printed first): the
mypyc build after ``python -m kvsim_native build``, else pure Python
(``KVSIM_PURE_PYTHON=1`` forces it; the environment passes to the children).

Usage (from the repo root)::

    .venv/bin/python tests/bench/bench_fastforward.py            # (a), (b), (c)
    .venv/bin/python tests/bench/bench_fastforward.py --only a --no-off
    .venv/bin/python tests/bench/bench_fastforward.py --million  # adds (d), long
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


def _child(
    workload: str,
    model: str,
    gpu: str,
    ff: bool,
    max_num_seqs: int | None,
    replicas: int = 1,
    async_scheduling: bool = False,
) -> None:
    """Simulate once in this process; print one JSON line of figures."""
    t0 = time.perf_counter()
    import gc
    import resource

    sys.path.insert(0, str(REPO))
    from sim.app.engine_config import EngineConfig
    from sim.app.run import RunSpec, simulate
    from sim.app.setup import resolve_run

    engine = EngineConfig(max_num_seqs=max_num_seqs, async_scheduling=async_scheduling)
    resolved = resolve_run(RunSpec(workload=workload, model=model, gpu=gpu, engine=engine))
    t1 = time.perf_counter()
    cpu1 = time.process_time()
    with tempfile.TemporaryDirectory() as out:
        summary = simulate(resolved, Path(out), fast_forward=ff, num_replicas=replicas)
    t2 = time.perf_counter()
    helpers = resource.getrusage(resource.RUSAGE_CHILDREN)  # helper processes, reaped
    gc.freeze()  # the process ends next, as `kvsim`'s entry point does (sim.cli.main)
    print(
        json.dumps(
            {
                "startup_s": t1 - t0,
                "sim_s": t2 - t1,
                "sim_cpu_s": time.process_time() - cpu1,
                "helper_cpu_s": helpers.ru_utime + helpers.ru_stime,
                "helper_peak_rss_mib": helpers.ru_maxrss / 1024.0,
                "num_steps": summary["num_steps"],
                "num_finished": summary["num_finished"],
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            }
        )
    )


def _run(
    workload: str,
    ff: bool,
    model: str,
    gpu: str,
    max_num_seqs: int | None = None,
    replicas: int = 1,
    async_scheduling: bool = False,
) -> dict:
    """One child process; its figures plus the process wall time (start-up included)."""
    cmd = [sys.executable, __file__, "--child", workload, model, gpu, "1" if ff else "0"]
    cmd += [str(max_num_seqs or 0), str(replicas), "1" if async_scheduling else "0"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)
    wall = time.perf_counter() - t0
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    figures["wall_s"] = wall
    return figures


def _yaml(tmp: Path, name: str, rate: float | None, num: int) -> str:
    arrival = "{type: burst}" if rate is None else f"{{type: poisson, rate: {rate}}}"
    path = tmp / f"{name}.yaml"
    path.write_text(
        f"name: {name}\narrival: {arrival}\nprompt_len: 512\noutput_len: 128\n"
        f"num_requests: {num}\nseed: 0\n"
    )
    return str(path)


def _median_run(
    workload: str,
    ff: bool,
    args: argparse.Namespace,
    seqs: int | None,
    replicas: int,
    async_scheduling: bool = False,
) -> dict:
    """The run with the median wall time of ``args.repeat`` runs (its figures), with
    the fastest and slowest walls added."""
    model, gpu = "Llama-3.1-8B", "A100-80GB"
    runs = sorted(
        (
            _run(workload, ff, model, gpu, seqs, replicas, async_scheduling)
            for _ in range(args.repeat)
        ),
        key=lambda r: r["wall_s"],
    )
    median = dict(runs[(len(runs) - 1) // 2])
    median["walls"] = [r["wall_s"] for r in runs]
    return median


def _line(label: str, r: dict) -> str:
    walls = r["walls"]
    spread = f" (of {len(walls)}: {walls[0]:.2f}-{walls[-1]:.2f} s)" if len(walls) > 1 else ""
    return (
        f"{label}: wall {r['wall_s']:.2f} s{spread}, start-up {r['startup_s']:.2f} s, "
        f"sim {r['sim_s']:.2f} s, sim cpu {r['sim_cpu_s']:.2f} s, "
        f"helpers cpu {r['helper_cpu_s']:.2f} s, "
        f"{r['num_steps']:,} steps, {r['num_steps'] / r['sim_s']:,.0f} steps/s, "
        f"peak RSS {r['peak_rss_mib']:.0f} MiB"
    )


def _both(
    label: str,
    workload: str,
    args: argparse.Namespace,
    seqs: int | None = None,
    replicas: int = 1,
) -> None:
    on = None
    if args.loops in ("sync", "both"):
        on = _median_run(workload, True, args, seqs, replicas)
        print(_line(f"{label} sync, FF on ", on), flush=True)
        if not args.no_off:
            off = _median_run(workload, False, args, seqs, replicas)
            print(_line(f"{label} sync, FF off", off), flush=True)
            print(
                f"{label} ratio off/on: wall {off['wall_s'] / on['wall_s']:.2f}x, "
                f"sim {off['sim_s'] / on['sim_s']:.2f}x",
                flush=True,
            )
    if args.loops in ("async", "both"):
        asy = _median_run(workload, True, args, seqs, replicas, async_scheduling=True)
        print(_line(f"{label} async, FF on ", asy), flush=True)
        if not args.no_off:
            off = _median_run(workload, False, args, seqs, replicas, async_scheduling=True)
            print(_line(f"{label} async, FF off", off), flush=True)
            print(
                f"{label} ratio async off/on: wall {off['wall_s'] / asy['wall_s']:.2f}x, "
                f"sim {off['sim_s'] / asy['sim_s']:.2f}x",
                flush=True,
            )
        if on is not None:
            print(
                f"{label} ratio async/sync FF on: wall {asy['wall_s'] / on['wall_s']:.2f}x, "
                f"sim {asy['sim_s'] / on['sim_s']:.2f}x",
                flush=True,
            )


def main() -> int:
    """Run the selected benchmarks; print each figure with fast-forward on and off."""
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        wl, model, gpu, ff, seqs, replicas, asy = sys.argv[2:9]
        _child(wl, model, gpu, ff == "1", int(seqs) or None, int(replicas), asy == "1")
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="abce", help="which of a, b, c, e to run (e.g. 'ac')")
    p.add_argument("--no-off", action="store_true", help="skip the fast-forward-off runs")
    p.add_argument(
        "--loops", choices=("sync", "async", "both"), default="both", help="engine loops to run"
    )
    p.add_argument("--million", action="store_true", help="also run (d): 1,000,000 chat")
    p.add_argument("--heavy-requests", type=int, default=2000, help="requests in (c)")
    p.add_argument(
        "--repeat", type=int, default=3, help="runs per figure; the median run is printed"
    )
    args = p.parse_args()
    sys.path.insert(0, str(REPO))
    import compileall

    import kvsim_native

    print(
        f"build of the hot modules: {kvsim_native.NATIVE_STATUS} (compiled with "
        f"`python -m kvsim_native build`, pure Python with {kvsim_native.PURE_ENV}=1)",
        flush=True,
    )
    for package in ("kvsim_native", "kvcore", "sim", "calibrate", "workloads"):
        compileall.compile_dir(REPO / package, quiet=1)
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        if "a" in args.only:
            _both("(a) 4 req/s ", _yaml(tmp, "vidur4", 4.0, 20000), args)
        if "b" in args.only:
            for rate in (12.0, 24.0):
                _both(f"(b) {rate:.0f} req/s", _yaml(tmp, f"vidur{rate:.0f}", rate, 20000), args)
        if "c" in args.only:
            heavy = _yaml(tmp, "burst", None, args.heavy_requests)
            _both("(c) burst, 128 seqs", heavy, args, seqs=128)
        if "e" in args.only:
            two = _yaml(tmp, "vidur8", 8.0, 20000)
            _both("(e) 2 replicas, 8 req/s", two, args, replicas=2)
        if args.million:
            import yaml

            from workloads.loader import PRESET_DIR

            data = yaml.safe_load((PRESET_DIR / "chat.yaml").read_text())
            data["num_requests"] = 1_000_000
            path = tmp / "chat_million.yaml"
            path.write_text(yaml.safe_dump(data, sort_keys=False))
            model, gpu = "Llama-3.1-8B", "H100-SXM"
            for ff in (True, False) if not args.no_off else (True,):
                r = _run(str(path), ff, model, gpu)
                print(
                    f"(d) 1M chat FF {'on ' if ff else 'off'}: wall {r['wall_s']:.1f} s, "
                    f"{r['num_steps']:,} steps, peak RSS {r['peak_rss_mib']:.0f} MiB "
                    f"({'under' if r['peak_rss_mib'] < 2048 else 'OVER'} 2 GB; helpers' "
                    f"largest {r['helper_peak_rss_mib']:.0f} MiB, pages shared with the run)",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
