"""Replay LLMServingSim's four real vLLM 0.19 runs through kvsim and compare.

    python scripts/ground_truth_compare.py GT_DIR OUT_DIR [--json]

GT_DIR holds the runs as LLMServingSim publishes them (``bench/examples/<hardware>/
<model>/`` of github.com/casys-kaist/LLMServingSim: ``meta.json``, ``requests.jsonl``,
...). For each run this calls ``kvsim run <run>/requests.jsonl`` with the run's engine
settings (``sim.validate.serving.RUNS``; vLLM 0.19's defaults where the run passed
none: utilization 0.9, block 16, prefix caching and chunked prefill on) into ``OUT_DIR/<run>``, then
``kvsim compare <run> OUT_DIR/<run>``. A run missing from GT_DIR is skipped with a note.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sim.validate.serving import RUNS, ServingRun  # noqa: E402


def run_flags(run: ServingRun) -> list[str]:
    """``kvsim run`` flags replaying ``run`` (:data:`sim.validate.serving.RUNS`)."""
    flags = ["--model", run.model, "--gpu", run.gpu]
    for name, value in run.engine.model_dump(exclude_defaults=True).items():
        flags += [f"--{name.replace('_', '-')}", str(value)]
    if run.num_replicas != 1:
        flags += ["--num-replicas", str(run.num_replicas), "--router", run.router]
    return flags


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gt_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--json", action="store_true", help="print each comparison as JSON")
    args = parser.parse_args(argv)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    )
    kvsim = [sys.executable, "-m", "sim.cli"]
    status = 0
    for served in RUNS:
        name, flags = served.name, run_flags(served)
        run = args.gt_dir / name
        if not (run / "requests.jsonl").is_file():
            print(f"{name}: not in {args.gt_dir}, skipped", file=sys.stderr)
            continue
        out = args.out_dir / name
        cmd = [*kvsim, "run", str(run / "requests.jsonl"), *flags, "--out", str(out)]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if res.returncode:
            print(res.stderr, file=sys.stderr)
            status = res.returncode
            continue
        cmp = [*kvsim, "compare", str(run), str(out), *(["--json"] if args.json else [])]
        status = subprocess.run(cmp, env=env).returncode or status
    return status


if __name__ == "__main__":
    raise SystemExit(main())
