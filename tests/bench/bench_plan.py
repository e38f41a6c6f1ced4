"""What precision costs: ``kvsim plan`` with probe runs lengthened until they decide,
against the same plan at a fixed length, in one session.

Each plan is a fresh ``python -m sim.cli plan`` process (whole-process wall time);
printed per plan: the answer, its bracket and per-seed range, the requests and runs
simulated (``plan.json``'s ``simulated``) and the wall time; then the ratios adaptive /
fixed. The default plan is the README's capacity question on the chat preset
(``--ttft-p90-s 0.5 --tpot-p99-s 0.05``).

Usage (from the repo root)::

    .venv/bin/python tests/bench/bench_plan.py                     # default start length
    .venv/bin/python tests/bench/bench_plan.py --num-requests 5000
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
PLAN = ["plan", "--question", "max_rate", "--workload", "chat"]
SLOS = ["--ttft-p90-s", "0.5", "--tpot-p99-s", "0.05"]


def _plan(out: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "sim.cli", *PLAN, *SLOS, "--out", str(out), *extra]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    doc = json.loads((out / "plan.json").read_text())
    return {"wall_s": wall, **doc}


def _line(name: str, doc: dict) -> str:
    ci = doc["confidence_interval"] or {}
    sim = doc["simulated"]
    return (
        f"{name:>9}: answer {doc['answer']:.2f} req/s (per-seed {ci.get('low', 0):.2f}"
        f"..{ci.get('high', 0):.2f}), {sim['num_requests']:,} requests in {sim['runs']} "
        f"runs, {doc['wall_s']:.1f} s wall"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=None, help="start length")
    args = parser.parse_args()
    extra = ["--num-requests", str(args.num_requests)] if args.num_requests else []
    with tempfile.TemporaryDirectory() as tmp:
        adaptive = _plan(Path(tmp) / "adaptive", extra)
        fixed = _plan(Path(tmp) / "fixed", [*extra, "--fixed-length"])
    print(_line("adaptive", adaptive))
    print(_line("fixed", fixed))
    print(
        f"adaptive / fixed: requests "
        f"{adaptive['simulated']['num_requests'] / fixed['simulated']['num_requests']:.2f}x, "
        f"wall {adaptive['wall_s'] / fixed['wall_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
