"""Client timeouts in ``kvsim run``: requests not finished ``timeout_s`` after arrival
are aborted through the scheduler (blocks freed, counted as failed, kept out of the
latencies), in the async default loop and the synchronous one; stages and prompt pools
run end to end."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from sim_run_helpers import write_yaml

from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec, run

OVERLOAD: dict[str, Any] = {
    "seed": 5,
    "arrival": {"type": "poisson", "rate": 12},
    "prompt_len": 2000,
    "output_len": 400,
    "num_requests": 70,
    "timeout_s": 5.0,
}


def _run(
    tmp_path: Path,
    data: dict[str, Any],
    name: str,
    render: bool = False,
    check: bool = True,
    **engine: Any,
) -> dict[str, Any]:
    """One run (records only; ``render``: its plots and report too), by default with
    the scheduler's and KV cache's invariants checked after every step."""
    workload = write_yaml(tmp_path / f"{name}.yaml", data)
    spec = RunSpec(
        workload=str(workload),
        model="Llama-3.1-8B",
        gpu="H100-SXM",
        engine=EngineConfig(**engine),
        check=check,
    )
    return run(spec, tmp_path / name, render=render)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_timed_out_requests_are_aborted_and_kept_out_of_latencies(
    tmp_path: Path, async_scheduling: bool
) -> None:
    # one of the two also renders the report of a run with aborted requests
    summary = _run(tmp_path, OVERLOAD, "run", async_scheduling, async_scheduling=async_scheduling)
    out = tmp_path / "run"
    assert (out / "report.html").is_file() == async_scheduling
    finished = _rows(out / "requests.csv")
    aborted = _rows(out / "aborted.csv")
    n = OVERLOAD["num_requests"]
    assert 0 < len(aborted) < n and len(finished) + len(aborted) == n
    assert summary["num_requests"] == n
    assert summary["num_finished"] == len(finished)
    assert summary["num_aborted"] == len(aborted)
    assert summary["timeouts"] == {
        "num_aborted": len(aborted),
        "before_first_token": sum(float(r["first_token_s"]) < 0 for r in aborted),
        "file": "aborted.csv",
    }
    assert not {r["request_id"] for r in finished} & {r["request_id"] for r in aborted}
    for r in finished:  # a finished request beat its timeout
        assert float(r["finish_s"]) - float(r["arrival_s"]) <= 5.0 + 1e-9
    for r in aborted:  # aborted at the first engine step boundary after the timeout
        late = float(r["abort_s"]) - float(r["arrival_s"]) - 5.0
        assert 0.0 <= late < 0.5
        assert int(r["output_tokens"]) < 400
    assert summary["e2e_s"]["p99"] <= 5.0 + 1e-9
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["num_aborted"] == len(aborted)


def test_without_timeouts_nothing_changes(tmp_path: Path) -> None:
    """No timeout: no aborted.csv, no abort fields; a timeout no request reaches gives
    the same requests.csv and steps.csv bytes as no timeout at all."""
    light = {**OVERLOAD, "arrival": {"type": "poisson", "rate": 0.5}, "num_requests": 8}
    light.update(output_len=100)
    light.pop("timeout_s")
    plain = _run(tmp_path, light, "plain", check=False)
    assert "num_aborted" not in plain and "timeouts" not in plain
    assert not (tmp_path / "plain" / "aborted.csv").exists()
    loose = _run(tmp_path, {**light, "timeout_s": 1000.0}, "loose", check=False)
    assert loose["num_aborted"] == 0 and loose["timeouts"]["file"] is None
    for name in ("requests.csv", "steps.csv"):
        a = (tmp_path / "plain" / name).read_bytes()
        assert a == (tmp_path / "loose" / name).read_bytes(), name


def test_stages_and_pool_run_end_to_end(tmp_path: Path) -> None:
    """Stage 2 (after_drain) starts after the last request of stage 1 finished; the
    pool repeats its prompts, so the prefix cache hits them."""
    data = {
        "seed": 2,
        "prompt_len": 600,
        "output_len": 20,
        "prompt_pool": {"size": 4, "order": "shuffled"},
        "stages": [
            {"arrival": {"type": "poisson", "rate": 4}, "num_requests": 12},
            {"arrival": {"type": "closed_loop", "concurrency": 2}, "num_requests": 6,
             "start": "after_drain"},
        ],
    }  # fmt: skip
    summary = _run(tmp_path, data, "staged")
    rows = _rows(tmp_path / "staged" / "requests.csv")
    assert summary["num_finished"] == 18
    by_id = {r["request_id"]: r for r in rows}
    first = [by_id[f"req-{i}"] for i in range(12)]
    second = [by_id[f"req-{i}"] for i in range(12, 18)]
    drained = max(float(r["finish_s"]) for r in first)
    assert min(float(r["arrival_s"]) for r in second) == pytest.approx(drained)
    assert summary["prefix_cache_hit_rate"] > 0.5
    assert sum(int(r["cached_tokens"]) for r in rows) >= 14 * 592


def test_staged_pool_with_timeouts_is_byte_identical(tmp_path: Path) -> None:
    """Same inputs and seed: the same bytes in every record file (aborted.csv too)."""
    data = {
        "seed": 4,
        "prompt_len": 1500,
        "output_len": 300,
        "prompt_pool": {"size": 16, "order": "random"},
        "timeout_s": 3.0,
        "stages": [
            {"arrival": {"type": "gamma", "rate": 20, "burstiness": 0.5}, "num_requests": 40},
            {"arrival": {"type": "closed_loop", "concurrency": 8}, "duration_s": 4.0,
             "start": "after_drain", "timeout_s": 2.0},
        ],
    }  # fmt: skip
    _run(tmp_path, data, "a", async_scheduling=False)
    # unchecked: checking the invariants must not change a byte either
    _run(tmp_path, data, "b", check=False, async_scheduling=False)
    _run(tmp_path, {**data, "seed": 5}, "c", check=False, async_scheduling=False)
    a, b, c = (tmp_path / n for n in "abc")
    assert (a / "aborted.csv").exists()
    for name in ("requests.csv", "aborted.csv", "steps.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "requests.csv").read_bytes() != (c / "requests.csv").read_bytes()


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_timeouts_with_the_cpu_tier_abort_requests_while_copies_run(
    tmp_path: Path, async_scheduling: bool
) -> None:
    """Overload on a small GPU cache with the CPU tier: requests time out while their
    loads or their batches are in flight; the invariants hold after every step and
    every request is either finished or aborted."""
    data = {
        **OVERLOAD,
        "num_requests": 80,
        "timeout_s": 8.0,
        "arrival": {"type": "poisson", "rate": 8},
        "prompt_pool": {"size": 8, "order": "random"},
    }
    summary = _run(
        tmp_path,
        data,
        "run",
        async_scheduling=async_scheduling,
        kv_offloading_size=16.0,
        num_gpu_blocks_override=800,
        max_model_len=4096,
    )
    assert summary["num_finished"] > 0 and summary["num_aborted"] > 0
    assert summary["num_finished"] + summary["num_aborted"] == 80
    assert summary["offload"]["num_loads"] > 0
