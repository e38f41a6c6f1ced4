"""Digests of what kvcore computes on a set of workloads, printed as JSON (run as a
script by ``tests/test_native.py``, once with the compiled build and once with
``KVSIM_PURE_PYTHON=1``).

Covers the simulator (the fast-forward exactness cases: light and heavy load, prefix
sharing, sessions, priorities, preemption, sliding windows, several replicas) and the
conformance traces replayed step by step (every manager, KV events, block tables),
the first 40 of them also with async scheduling, and the KV connectors (the CPU
offload tier, P/D) in both engine loops.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim_run_helpers import write_yaml  # noqa: E402
from test_fast_forward import FILES, ROUTERS, _case, _simulate, _strip_wall  # noqa: E402

import kvcore  # noqa: E402
from sim.conformance.generate import random_case  # noqa: E402
from sim.conformance.replay_kvcore import run_kvcore_steps  # noqa: E402

NUM_ASYNC_TRACES = 40
"""The first traces also replayed with async scheduling (AsyncScheduler, batch queue)."""


def digests(num_sim: int, num_traces: int) -> dict[str, object]:
    out: dict[str, object] = {"native_status": kvcore.NATIVE_STATUS}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(num_sim):
            wl, eng, model, replicas = _case(i)
            case_dir = Path(tmp) / str(i)
            case_dir.mkdir()
            path = write_yaml(case_dir / "wl.yaml", wl)
            summary = _simulate(
                path, eng, model, replicas, case_dir / "out", True, ROUTERS[i % len(ROUTERS)]
            )
            h = hashlib.sha256(json.dumps(_strip_wall(summary), sort_keys=True).encode())
            for name in FILES:
                h.update((case_dir / "out" / name).read_bytes())
            out[f"sim{i}"] = h.hexdigest()
    for i in range(num_traces):
        config, trace = random_case(20240607, i)
        lines = run_kvcore_steps(config, trace)
        out[f"trace{i}"] = hashlib.sha256(json.dumps(lines, sort_keys=True).encode()).hexdigest()
    for i in range(min(num_traces, NUM_ASYNC_TRACES)):
        config, trace = random_case(20240607, i, async_scheduling=True)
        lines = run_kvcore_steps(config, trace)
        out[f"async{i}"] = hashlib.sha256(json.dumps(lines, sort_keys=True).encode()).hexdigest()
    out.update(connector_digests())
    return out


def connector_digests() -> dict[str, str]:
    """The simulator with a KV connector in both engine loops: the CPU offload tier
    under KV pressure (preemptions, flushes, loads) and a P/D split."""
    from sim.app.engine_config import EngineConfig
    from sim.app.pd_config import PDSpec
    from sim.app.run import RunSpec, run
    from workloads.overrides import WorkloadOverrides

    out: dict[str, str] = {}
    load = WorkloadOverrides(rate=8.0, num_requests=30)
    with tempfile.TemporaryDirectory() as tmp:
        for asy in (False, True):
            offload = EngineConfig(
                num_gpu_blocks_override=400,
                max_model_len=4096,
                kv_offloading_size=8.0,
                async_scheduling=asy,
            )
            pd = EngineConfig(max_model_len=4096, async_scheduling=asy)
            runs = {
                "offload": RunSpec(workload="rag", engine=offload, workload_overrides=load),
                "pd": RunSpec(workload="rag", engine=pd, workload_overrides=load, pd=PDSpec(1, 2)),
            }
            for name, spec in runs.items():
                case_dir = Path(tmp) / f"{name}{asy}"
                run(spec, case_dir, render=False, helpers=False)
                h = hashlib.sha256()
                for f in ("requests.csv", "steps.csv"):
                    h.update((case_dir / f).read_bytes())
                out[f"{name}_{'async' if asy else 'sync'}"] = h.hexdigest()
    return out


if __name__ == "__main__":
    print(json.dumps(digests(int(sys.argv[1]), int(sys.argv[2]))))
