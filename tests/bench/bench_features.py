"""Cost of the deployment features in ``kvsim run``: speculative decoding (n-gram,
EAGLE-3, a draft model), the CPU KV offload tier and prefill/decode disaggregation
(``--pd``: its pools of instances), each against the plain engine (one replica) on the
same loop, measured in the same run.

The bundled ``chat`` preset (its seed, arrivals and lengths) with ``num_requests`` set
to ``--requests`` (default 5,000), Llama-3.1-8B on H100-SXM, the default roofline
latency model and KV budget. Timed: ``sim.app.run.simulate`` alone (configuration, plots
and the report left out), best of ``--repeats`` runs, wall-clock seconds. Printed per
case: the loop, seconds, simulated requests per wall-second, engine steps per
wall-second and the ratio of its time to the plain engine's on the same loop
(speculative decoding, the offload tier and P/D step one by one: fast-forward does not
cover them, which is most of the ratio; a P/D run also steps every instance).

Usage (from the repo root)::

    .venv/bin/python tests/bench/bench_features.py [--requests 5000] [--repeats 2]
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sim import chat_workload  # noqa: E402

from sim.app.engine_config import EngineConfig  # noqa: E402
from sim.app.run import RunSpec, simulate  # noqa: E402
from sim.app.setup import resolve_run  # noqa: E402

CASES: list[tuple[str, bool, dict[str, Any]]] = [
    ("plain", True, {}),
    ("ngram k=3", True, {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}),
    ("eagle3 k=3", True, {"speculative_config": {"method": "eagle3", "num_speculative_tokens": 3}}),
    (
        "draft model k=4",
        True,
        {
            "speculative_config": {
                "method": "draft_model",
                "model": "Llama-3.2-1B",
                "num_speculative_tokens": 4,
            }
        },
    ),
    ("CPU offload 8 GiB", True, {"kv_offloading_size": 8.0}),
    ("P/D 1:2", True, {"pd": "prefill=1,decode=2"}),
    ("plain", False, {}),
    ("ngram k=3", False, {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}),
    ("CPU offload 8 GiB", False, {"kv_offloading_size": 8.0}),
    ("P/D 1:2", False, {"pd": "prefill=1,decode=2"}),
    ("P/D 2:4", False, {"pd": "prefill=2,decode=4"}),
]
"""(name, async scheduling, engine settings; ``pd``: ``--pd``'s text, a run of its
pools instead of one replica): the plain engine first on each loop."""


def _time(workload: Path, out: Path, async_scheduling: bool, engine: dict[str, Any]) -> tuple:
    engine = dict(engine)
    pd = engine.pop("pd", None)
    config = EngineConfig(async_scheduling=async_scheduling, **engine)
    resolved = resolve_run(RunSpec(workload=str(workload), engine=config, pd=pd))
    out.mkdir(parents=True, exist_ok=True)
    gc.collect()
    t0 = time.perf_counter()
    summary = simulate(resolved, out)
    return time.perf_counter() - t0, summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=5000)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        workload = chat_workload(tmp, args.requests)
        plain: dict[bool, float] = {}
        header = ("case", "loop", "wall_s", "req/s", "steps/s", "x plain")
        print("{:20s} {:5s} {:>8s} {:>8s} {:>9s} {:>8s}".format(*header))
        for i, (name, async_scheduling, engine) in enumerate(CASES):
            runs = [
                _time(workload, tmp / f"{i}-{r}", async_scheduling, engine)
                for r in range(args.repeats)
            ]
            wall, summary = min(runs, key=lambda x: x[0])
            plain.setdefault(async_scheduling, wall)
            loop = "async" if async_scheduling else "sync"
            print(
                f"{name:20s} {loop:5s} {wall:8.2f} {summary['num_finished'] / wall:8.0f} "
                f"{summary['num_steps'] / wall:9.0f} {wall / plain[async_scheduling]:8.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
