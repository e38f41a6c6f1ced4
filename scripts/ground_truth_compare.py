"""Replay LLMServingSim's four real vLLM 0.19 runs through kvsim and compare.

    python scripts/ground_truth_compare.py GT_DIR OUT_DIR [--json]

GT_DIR holds the runs as LLMServingSim publishes them (``bench/examples/<hardware>/
<model>/`` of github.com/casys-kaist/LLMServingSim: ``meta.json``, ``requests.jsonl``,
...). For each run this calls ``kvsim run <run>/requests.jsonl`` with the run's engine
settings (:data:`RUNS`; vLLM 0.19's defaults where the run passed none: utilization
0.9, block 16, prefix caching and chunked prefill on) into ``OUT_DIR/<run>``, then
``kvsim compare <run> OUT_DIR/<run>``. A run missing from GT_DIR is skipped with a note.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent / "ground_truth"
REPO = HERE.parent.parent
PRO6000 = str(HERE / "rtx-pro-6000.yaml")
COMMON = ["--max-num-batched-tokens", "2048"]

RUNS: dict[str, list[str]] = {
    # meta.json records 2588 blocks; kvsim's 0.33 budget would subtract CUDA graphs
    "RTX4090_Llama-3.1-8B": [
        "--model", "Llama-3.1-8B", "--gpu", "RTX-4090", "--max-num-seqs", "256",
        "--max-model-len", "32768", "--num-gpu-blocks-override", "2588",
    ],
    "RTXPRO6000_Llama-3.1-8B": [
        "--model", "Llama-3.1-8B", "--gpu", PRO6000, "--max-num-seqs", "128",
        "--gpu-memory-utilization", "0.9",
    ],
    "RTXPRO6000_Qwen3-32B": [
        "--model", str(HERE / "Qwen3-32B.json"), "--gpu", PRO6000,
        "--tensor-parallel-size", "2", "--max-num-seqs", "128",
        "--gpu-memory-utilization", "0.9",
    ],
    # data parallel 2 with expert parallelism: two replicas with the whole model each
    # (kvsim has no expert parallelism), vLLM's DP balancer ~ least outstanding
    "RTXPRO6000_Qwen3-30B-A3B-Instruct-2507": [
        "--model", str(HERE / "Qwen3-30B-A3B-Instruct-2507.json"), "--gpu", PRO6000,
        "--num-replicas", "2", "--router", "least_outstanding", "--max-num-seqs", "128",
        "--gpu-memory-utilization", "0.9",
    ],
}  # fmt: skip


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
    for name, flags in RUNS.items():
        run = args.gt_dir / name
        if not (run / "requests.jsonl").is_file():
            print(f"{name}: not in {args.gt_dir}, skipped", file=sys.stderr)
            continue
        out = args.out_dir / name
        cmd = [*kvsim, "run", str(run / "requests.jsonl"), *flags, *COMMON, "--out", str(out)]
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
