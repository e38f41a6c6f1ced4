"""``kvsim run --kv-offloading-size``: the CPU KV offload tier end to end.

Transfer timing against hand-computed cases (constant step times, Llama-3.1-8B on
H100-SXM: 2 MiB of KV per block, a 64 GB/s host link each way), a shared-prefix
workload on a small GPU KV budget that the CPU tier serves faster, and the engine
config's dump without the flag (what keeps every other output byte-identical).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from sim_run_helpers import write_jsonl

from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec, run
from workloads.overrides import WorkloadOverrides

STEP_S = 0.01  # requests.csv has 8 decimals: times are compared to 1e-8 s
BLOCK_BYTES = 32 * 2 * 8 * 128 * 2 * 16  # layers x (K, V) x kv heads x head dim x bf16 x 16
LINK = 64e9  # H100-SXM host_link_gbps, bytes/s per direction
PROMPT = list(range(1, 65))  # 4 full blocks of 16 tokens
OFFLOAD = dict(
    latency_model="constant",
    constant_step_s=STEP_S,
    enable_prefix_caching=False,  # every hit is a CPU hit
    async_scheduling=False,
    kv_offloading_size=1.0,
    num_gpu_blocks_override=64,
    max_model_len=512,
)


def _run(trace: Path, out: Path, **engine: object) -> dict:
    """One run of ``trace`` with the CPU tier (no plots: kept cheap); its summary."""
    spec = RunSpec(workload=str(trace), engine=EngineConfig(**{**OFFLOAD, **engine}))
    return run(spec, out, render=False, helpers=False)


def _two_requests(tmp_path: Path, b_arrival_s: float) -> dict[str, list[str]]:
    """Request ``a`` (64 tokens) at 0, then ``b`` (the same 64 and 16 more) at
    ``b_arrival_s``, one output token each; the run's requests.csv by request id."""
    rows = [
        {"request_id": "a", "arrival_s": 0.0, "prompt_token_ids": PROMPT, "output_tokens": 1},
        {
            "request_id": "b",
            "arrival_s": b_arrival_s,
            "prompt_token_ids": PROMPT + list(range(100, 116)),
            "output_tokens": 1,
        },
    ]
    trace = write_jsonl(tmp_path / "two.jsonl", rows)
    summary = _run(trace, tmp_path / "out")
    lines = (tmp_path / "out" / "requests.csv").read_text().splitlines()
    by_id = {line.split(",")[0]: line.split(",") for line in lines[1:]}
    return {"summary": summary, **by_id}


def test_load_time_is_blocks_over_bandwidth(tmp_path):
    """``b`` arrives after ``a``'s store ended: its 4 prompt blocks load over the link
    (4 x 2 MiB / 64 GB/s) before its step computes the other 16 tokens."""
    got = _two_requests(tmp_path, 1.0)
    load_s = 4 * BLOCK_BYTES / LINK
    assert float(got["a"][3]) == pytest.approx(STEP_S, abs=1e-8)
    assert float(got["b"][3]) == pytest.approx(1.0 + load_s + STEP_S, abs=1e-8)
    off = got["summary"]["offload"]
    assert off["num_cpu_blocks"] == (1 << 30) // BLOCK_BYTES
    assert (off["num_loads"], off["load_blocks"], off["cpu_prefix_cache_hits"]) == (1, 4, 64)
    # a's 4 blocks, then b's fifth (its first four are in the tier already)
    assert (off["num_stores"], off["store_blocks"]) == (2, 5)
    assert off["load_bytes"] == 4 * BLOCK_BYTES
    assert off["load_transfer_s"] == pytest.approx(load_s, rel=1e-12)
    assert off["store_transfer_s"] == pytest.approx(5 * BLOCK_BYTES / LINK, rel=1e-12)
    assert off["peak_cpu_blocks"] == 5


def test_load_waits_for_the_store_in_flight(tmp_path):
    """``b`` arrives while ``a``'s store (submitted at the start of the step after
    ``a``'s, at 0.01 s) is still being written: the engine sleeps until the store ends,
    then loads, then computes. No request is stuck while only transfers are pending."""
    arrival = STEP_S + 0.0001
    got = _two_requests(tmp_path, arrival)
    store_end = STEP_S + 4 * BLOCK_BYTES / LINK
    assert arrival < store_end
    first_token = store_end + 4 * BLOCK_BYTES / LINK + STEP_S
    assert float(got["b"][3]) == pytest.approx(first_token, abs=1e-8)
    assert got["summary"]["offload"]["cpu_prefix_cache_hits"] == 64


def test_a_step_reusing_blocks_waits_for_their_store(tmp_path):
    """``a``'s store is deferred to the next step's start (0.01 s); that step gives
    ``a``'s freed blocks to ``b`` (a 34-block pool), so it flushes the store first
    (``jobs_to_flush``): ``b``'s step computes after the 4 blocks are written."""
    rows = [
        {"request_id": "a", "arrival_s": 0.0, "prompt_token_ids": PROMPT, "output_tokens": 1},
        {
            "request_id": "b",
            "arrival_s": 0.005,
            "prompt_token_ids": list(range(1000, 1500)),
            "output_tokens": 1,
        },
    ]
    trace = write_jsonl(tmp_path / "flush.jsonl", rows)
    _run(trace, tmp_path / "out", num_gpu_blocks_override=34)
    lines = (tmp_path / "out" / "requests.csv").read_text().splitlines()
    b = next(line.split(",") for line in lines if line.startswith("b,"))
    store_s = 4 * BLOCK_BYTES / LINK
    assert float(b[3]) == pytest.approx(STEP_S + store_s + STEP_S, abs=1e-8)
    steps = (tmp_path / "out" / "steps.csv").read_text().splitlines()
    start, duration = (float(x) for x in steps[2].split(",")[2:4])
    assert (start, duration) == pytest.approx((STEP_S, store_s + STEP_S), abs=1e-8)


def _rag(tmp_path: Path, name: str, size: float | None) -> dict:
    """The rag preset (8 shared 3000-token documents) at 4 req/s on 800 GPU blocks
    (about 4 documents), 60 requests."""
    engine = EngineConfig(
        num_gpu_blocks_override=800,
        max_model_len=4096,
        async_scheduling=False,
        kv_offloading_size=size,
    )
    spec = RunSpec(
        workload="rag",
        engine=engine,
        workload_overrides=WorkloadOverrides(rate=4.0, num_requests=60),
    )
    run(spec, tmp_path / name, render=False, helpers=False)
    return json.loads((tmp_path / name / "summary.json").read_text())


def test_cpu_tier_serves_shared_prefixes_faster(tmp_path):
    """Documents evicted from the small GPU cache come back from the CPU tier (hits
    > 0) instead of being prefilled again: lower mean TTFT at the same load."""
    off = _rag(tmp_path, "off", None)
    on = _rag(tmp_path, "on", 8.0)
    assert "offload" not in off
    tier = on["offload"]
    assert tier["cpu_prefix_cache_hits"] > 0 and tier["num_loads"] > 0
    total = tier["gpu_prefix_cache_hit_rate"] + tier["cpu_prefix_cache_hit_rate"]
    assert total <= 1.0
    assert tier["gpu_prefix_cache_hit_rate"] == pytest.approx(on["prefix_cache_hit_rate"])
    assert on["ttft_s"]["mean"] < off["ttft_s"]["mean"]
    config = yaml.safe_load((tmp_path / "on" / "config.yaml").read_text())
    assert config["engine"]["kv_offloading_size"] == 8.0
    assert config["kv_offload"]["num_cpu_blocks"] == tier["num_cpu_blocks"]
    assert config["fast_forward"].startswith("not applicable")
    plain = yaml.safe_load((tmp_path / "off" / "config.yaml").read_text())
    assert "kv_offloading_size" not in plain["engine"] and "kv_offload" not in plain


def test_engine_dump_without_the_flag_is_unchanged():
    """No CPU tier: the dump (config.yaml, hashes, sweep workers) has no new key; with
    one, it round-trips."""
    assert "kv_offloading_size" not in EngineConfig().model_dump()
    assert "kv_offloading_size" not in EngineConfig().model_dump(mode="json")
    cfg = EngineConfig(kv_offloading_size=2.5, async_scheduling=False)
    assert EngineConfig(**cfg.model_dump(mode="json")) == cfg


# -- async scheduling (vLLM 0.33.0's default loop) -------------------------------------


def _behind_a_decode(tmp_path: Path, async_scheduling: bool) -> dict[str, list[str]]:
    """``a`` (64 tokens, stored in the tier) and ``c`` (16 tokens, 60 output tokens:
    the GPU computes a 10 ms step after another) at 0, ``b`` (``a``'s 64 and 16 more)
    at 0.2 s; ``b``'s prompt blocks come back from the tier while ``c`` decodes."""
    rows = [
        {"request_id": "a", "arrival_s": 0.0, "prompt_token_ids": PROMPT, "output_tokens": 1},
        {
            "request_id": "c",
            "arrival_s": 0.0,
            "prompt_token_ids": list(range(500, 516)),
            "output_tokens": 60,
        },
        {
            "request_id": "b",
            "arrival_s": 0.2,
            "prompt_token_ids": PROMPT + list(range(100, 116)),
            "output_tokens": 1,
        },
    ]
    name = "async" if async_scheduling else "sync"
    trace = write_jsonl(tmp_path / f"{name}.jsonl", rows)
    out = tmp_path / name
    summary = run(
        RunSpec(
            workload=str(trace),
            engine=EngineConfig(**{**OFFLOAD, "async_scheduling": async_scheduling}),
            check=True,  # the scheduler's invariants after every step
        ),
        out,
        render=False,
        helpers=False,
    )
    lines = (out / "requests.csv").read_text().splitlines()
    by_id = {line.split(",")[0]: line.split(",") for line in lines[1:]}
    return {"summary": summary, **by_id}


def test_async_a_load_reaches_the_scheduler_with_its_batch_output(tmp_path):
    """Hand-computed. Synchronous: ``b`` joins at the end of the step running at
    0.2 s (step 20 starts at 0.200131: step 1 waited for ``a``'s 4-block store,
    flushed because ``c``'s new block was one of ``a``'s); step 20 allocates ``b``'s
    blocks and loads them (done within the step, reported at its end), step 21
    computes ``b``: first token at 0.200131 + 0.02.

    Async: no flush (``c``'s block is allocated while ``a``'s output is still in
    flight), batches run back to back from 0. ``b`` arrives as batch 20 starts
    (0.2); it is added when batch 19's output is applied and scheduled in batch 21
    (allocation, no token), whose worker side starts the load at 21's GPU start
    (0.21, done at 0.210131); the load is reported with batch 21's output (0.22),
    after batch 22 was scheduled, so ``b`` computes in batch 23: first token at
    0.24, two steps later than the synchronous loop (one for the arrival, one for the
    load's report)."""
    store_s = 4 * BLOCK_BYTES / LINK
    sync = _behind_a_decode(tmp_path, False)
    assert float(sync["b"][3]) == pytest.approx(20 * STEP_S + store_s + 2 * STEP_S, abs=1e-8)
    got = _behind_a_decode(tmp_path, True)
    assert float(got["b"][3]) == pytest.approx(0.24, abs=1e-8)
    assert float(got["c"][4]) == pytest.approx(60 * STEP_S, abs=1e-8)  # never waits
    for summary in (sync["summary"], got["summary"]):
        off = summary["offload"]
        assert (off["num_loads"], off["load_blocks"], off["cpu_prefix_cache_hits"]) == (1, 4, 64)
        # a's 4 blocks, c's 1, b's fifth
        assert (off["num_stores"], off["store_blocks"]) == (3, 6)
    steps = (tmp_path / "sync" / "steps.csv").read_text().splitlines()
    assert float(steps[2].split(",")[3]) == pytest.approx(store_s + STEP_S, abs=1e-8)
    steps = (tmp_path / "async" / "steps.csv").read_text().splitlines()
    assert {float(line.split(",")[3]) for line in steps[1:]} == {STEP_S}
    config = yaml.safe_load((tmp_path / "async" / "config.yaml").read_text())
    assert config["engine"]["async_scheduling"] is True
    assert "OffloadingConnector worker side per batch" in config["engine_loop"]
    plain = yaml.safe_load((tmp_path / "sync" / "config.yaml").read_text())
    assert plain["engine_loop"] == "synchronous: Scheduler (EngineCore.step)"


def test_async_load_after_an_idle_engine_as_synchronous(tmp_path):
    """With nothing computing, batches without tokens run the connector at once
    (``kv_connector_no_forward``) and the engine sleeps until the load ends: ``b``'s
    first token comes as in the synchronous loop (test_load_time_is_blocks_over_bandwidth)."""
    rows = [
        {"request_id": "a", "arrival_s": 0.0, "prompt_token_ids": PROMPT, "output_tokens": 1},
        {
            "request_id": "b",
            "arrival_s": 1.0,
            "prompt_token_ids": PROMPT + list(range(100, 116)),
            "output_tokens": 1,
        },
    ]
    trace = write_jsonl(tmp_path / "two.jsonl", rows)
    summary = _run(trace, tmp_path / "out", async_scheduling=True)
    lines = (tmp_path / "out" / "requests.csv").read_text().splitlines()
    b = next(line.split(",") for line in lines if line.startswith("b,"))
    assert float(b[3]) == pytest.approx(1.0 + 4 * BLOCK_BYTES / LINK + STEP_S, abs=1e-8)
    assert summary["offload"]["num_loads"] == 1


def _rag_async(tmp_path: Path, name: str) -> dict:
    """:func:`_rag` with async scheduling, the invariants checked every step."""
    engine = EngineConfig(num_gpu_blocks_override=800, max_model_len=4096, kv_offloading_size=8.0)
    spec = RunSpec(
        workload="rag",
        engine=engine,
        workload_overrides=WorkloadOverrides(rate=4.0, num_requests=60),
        check=True,
    )
    run(spec, tmp_path / name, render=False, helpers=False)
    return json.loads((tmp_path / name / "summary.json").read_text())


def test_async_cpu_tier_run_completes_is_deterministic_and_lags_sync(tmp_path):
    """The default loop with the tier: every request finishes, the tier serves hits,
    the same seed gives the same bytes, and TTFT is no lower than the synchronous
    loop's at this low load (batches are planned one step ahead)."""
    a = _rag_async(tmp_path, "a")
    b = _rag_async(tmp_path, "b")
    sync = _rag(tmp_path, "sync", 8.0)
    assert a["num_finished"] == 60
    tier = a["offload"]
    assert tier["cpu_prefix_cache_hits"] > 0 and tier["num_loads"] > 0
    assert tier["num_stores"] > 0
    for name in ("requests.csv", "steps.csv", "config.yaml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert {**a, "wall_s": 0} == {**b, "wall_s": 0}  # the run's wall time aside
    assert a["ttft_s"]["mean"] >= sync["ttft_s"]["mean"]


def test_the_cli_runs_the_tier_with_its_default_loop(tmp_path):
    """``kvsim run TRACE --kv-offloading-size 1`` (async scheduling, vLLM's default)
    exits 0 and records the loop; it used to need --no-async-scheduling."""
    from typer.testing import CliRunner

    from sim.cli import app

    rows = [
        {"request_id": "a", "arrival_s": 0.0, "prompt_token_ids": PROMPT, "output_tokens": 2},
        {"request_id": "b", "arrival_s": 0.5, "prompt_token_ids": PROMPT, "output_tokens": 2},
    ]
    trace = write_jsonl(tmp_path / "t.jsonl", rows)
    out = tmp_path / "out"
    args = ["run", str(trace), "--out", str(out), "--no-report", "--kv-offloading-size", "1"]
    res = CliRunner().invoke(app, [*args, "--max-model-len", "512"])
    assert res.exit_code == 0, res.output
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["engine"]["async_scheduling"] is True
    assert config["engine_loop"].startswith("async scheduling")
    assert json.loads((out / "summary.json").read_text())["num_finished"] == 2


def test_async_cpu_tier_under_kv_pressure_keeps_the_invariants(tmp_path):
    """Half the GPU blocks at twice the rate: requests are preempted (their blocks'
    stores flushed, frees deferred while batches are in flight) and loaded back; the
    scheduler's invariants hold after every batch and every request finishes."""
    engine = EngineConfig(num_gpu_blocks_override=400, max_model_len=4096, kv_offloading_size=8.0)
    spec = RunSpec(
        workload="rag",
        engine=engine,
        workload_overrides=WorkloadOverrides(rate=8.0, num_requests=60),
        check=True,
    )
    summary = run(spec, tmp_path / "out", render=False, helpers=False)
    assert summary["num_finished"] == 60
    assert summary["num_preemptions"] > 0 and summary["offload"]["num_loads"] > 0
