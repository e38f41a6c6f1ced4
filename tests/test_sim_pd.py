"""``kvsim run --pd``: prefill/decode disaggregation end to end.

Small traces with constant step times (Llama-3.1-8B on H100-SXM: 2 MiB of KV per
block on one rank): the TTFT split adds up, the transfers move blocks x bytes per
block, both pools free every block, a slower link costs TTFT and not TPOT, the same
inputs give the same bytes, and bad configurations exit 2 with one message.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from sim_run_helpers import write_jsonl
from typer.testing import CliRunner

from sim.app.engine_config import EngineConfig
from sim.app.pd_config import PDSpec, check_decode_fits, parse_pd
from sim.app.run import RunSpec, run
from sim.cli import app

STEP_S = 0.01
BLOCK_BYTES = 32 * 2 * 8 * 128 * 2 * 16  # layers x (K, V) x kv heads x head dim x bf16 x 16
ENGINE = dict(
    latency_model="constant",
    constant_step_s=STEP_S,
    async_scheduling=False,
    num_gpu_blocks_override=256,
    max_model_len=1024,
)


def _trace(tmp_path: Path) -> Path:
    rows = [
        {
            "request_id": f"r{i}",
            "arrival_s": 0.004 * i,
            "prompt_token_ids": list(range(1 + 50 * i, 1 + 50 * i + 40 + 30 * i)),
            "output_tokens": 5 + i,
        }
        for i in range(8)
    ]
    return write_jsonl(tmp_path / "pd.jsonl", rows)


def _run(trace: Path, out: Path, pd: PDSpec, **engine: object) -> tuple[dict, list[dict[str, str]]]:
    spec = RunSpec(
        workload=str(trace), engine=EngineConfig(**{**ENGINE, **engine}), pd=pd, check=True
    )
    summary = run(spec, out, render=False, helpers=False)
    with (out / "requests.csv").open() as f:
        return summary, list(csv.DictReader(f))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pd")
    trace = _trace(tmp)
    return trace, tmp, _run(trace, tmp / "base", PDSpec(1, 2))


def test_ttft_is_the_sum_of_its_parts_and_transfers_move_whole_blocks(base):
    _, _, (summary, rows) = base
    assert len(rows) == 8 and summary["num_finished"] == 8
    for r in rows:
        ttft = float(r["first_token_s"]) - float(r["arrival_s"])
        parts = sum(
            float(r[k]) for k in ("prefill_queue_s", "prefill_s", "transfer_s", "decode_queue_s")
        )
        assert parts == pytest.approx(ttft, abs=1e-7)
        blocks = -(-int(r["prompt_tokens"]) // 16)  # no prefix hits: every block is read
        assert int(r["transfer_blocks"]) == blocks
        assert int(r["transfer_bytes"]) == blocks * BLOCK_BYTES
        # the read: 20 us + bytes at 50 GB/s, plus any wait for the NIC
        assert float(r["transfer_s"]) >= 20e-6 + blocks * BLOCK_BYTES / 50e9 - 1e-8
        assert int(r["replica"]) == 1 + int(r["decode_instance"])  # prefill ids first
        assert float(r["prefill_s"]) >= STEP_S - 1e-9
    pd = summary["pd"]
    assert pd["transfers"]["count"] == 8
    assert pd["transfers"]["bytes"] == sum(int(r["transfer_bytes"]) for r in rows)
    assert pd["prefill"]["blocks_in_use_at_end"] == 0
    assert pd["decode"]["blocks_in_use_at_end"] == 0
    assert summary["num_replicas"] == 3


def test_a_slower_link_raises_ttft_not_tpot(base):
    trace, tmp, (fast, fast_rows) = base
    slow, slow_rows = _run(trace, tmp / "slow", PDSpec(1, 2, kv_transfer_gbps=0.5))
    assert slow["ttft_s"]["mean"] > fast["ttft_s"]["mean"] + 0.005
    assert slow["pd"]["transfers"]["seconds"]["mean"] > fast["pd"]["transfers"]["seconds"]["mean"]
    assert slow["tpot_s"]["mean"] == pytest.approx(fast["tpot_s"]["mean"], rel=1e-9)


def test_same_inputs_same_bytes(base):
    trace, tmp, _ = base
    a, b = tmp / "a", tmp / "b"
    _run(trace, a, PDSpec(2, 1))
    _run(trace, b, PDSpec(2, 1))
    for name in ("requests.csv", "steps.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    config = (a / "config.yaml").read_text()
    assert "kv_producer" in config and "prefill_instances: 2" in config
    assert "pd" in json.loads((a / "summary.json").read_text())


def test_a_decode_pool_that_cannot_hold_one_request_is_refused():
    check_decode_fits(64, 16, 1024, 1024)  # 64 blocks of 16 tokens hold 1024
    with pytest.raises(ValueError, match="cannot hold one request.*1024 tokens .64 blocks"):
        check_decode_fits(63, 16, 1024, 1024)


def test_parse_pd():
    assert parse_pd("prefill=2,decode=4") == PDSpec(2, 4)
    assert parse_pd("decode=1, prefill=1, kv_transfer_gbps=400").kv_transfer_gbps == 400.0
    for bad, word in (
        ("prefill=1", "decode=N is required"),
        ("prefill=1,decode=0", "decode must be an integer >= 1"),
        ("prefill=1,decode=1,gpu=h100", "allowed keys: prefill, decode"),
        ("prefill=1,decode=x", "decode must be an integer"),
        ("prefill=1,decode=1,kv_transfer_gbps=0", "kv_transfer_gbps must be > 0"),
    ):
        with pytest.raises(ValueError, match=word):
            parse_pd(bad)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--pd", "prefill=1,decode=2,tp=2", "--no-async-scheduling"], "allowed keys"),
        (["--pd", "prefill=1,decode=2", "--kv-offloading-size", "4"], "--kv-offloading-size"),
        (
            ["--pd", "prefill=1,decode=1", "--no-async-scheduling", "--num-replicas", "2"],
            "--num-replicas",
        ),
        (
            [
                "--pd",
                "prefill=1,decode=1",
                "--no-async-scheduling",
                "--num-gpu-blocks-override",
                "8",
                "--max-model-len",
                "1024",
            ],
            "does not fit",  # the KV budget's own check, before the decode pool's
        ),
    ],
)
def test_bad_pd_configs_exit_2_with_one_message(tmp_path, args, words):
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app, ["run", str(_trace(tmp_path)), "--out", str(out), "--no-report", *args]
    )
    assert res.exit_code == 2, res.output
    assert words in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_the_report_draws_the_pools(base):
    from reports.run_report import render_run

    _, tmp, _ = base
    render_run(tmp / "base")
    assert (tmp / "base" / "plots" / "pd.png").is_file()
    assert "pd" in (tmp / "base" / "report.html").read_text()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("prefill: {replicas: 1}\ndecode: {replicas: 1, tp: 2}\n", "decode.tp"),
        ("prefill: {replicas: 1}\n", "decode: Field required"),
        (
            "prefill: {replicas: 1}\ndecode: {replicas: 1, engine: {block_size: 32}}\n",
            "decode.engine.block_size: both pools need the same block_size",
        ),
        (
            "prefill: {replicas: 1, engine: {max_num_seqz: 4}}\ndecode: {replicas: 1}\n",
            "prefill.engine: max_num_seqz",
        ),
    ],
)
def test_bad_pd_files_exit_2_naming_the_field(tmp_path, text, words):
    pools = tmp_path / "pools.yaml"
    pools.write_text(text)
    out = tmp_path / "out"
    args = ["--pd", str(pools), "--no-async-scheduling", "--no-report"]
    res = CliRunner().invoke(app, ["run", str(_trace(tmp_path)), "--out", str(out), *args])
    assert res.exit_code == 2, res.output
    assert words in res.output and "Traceback" not in res.output, res.output
    assert not out.exists()


def test_a_pool_with_its_own_engine_arguments(tmp_path):
    pools = tmp_path / "pools.yaml"
    pools.write_text(
        "prefill: {replicas: 1}\ndecode: {replicas: 2, engine: {num_gpu_blocks_override: 128}}\n"
    )
    summary, rows = _run(_trace(tmp_path), tmp_path / "out", parse_pd(str(pools)))
    assert len(rows) == 8
    config = (tmp_path / "out" / "config.yaml").read_text()
    assert "decode_pool:" in config and "num_gpu_blocks: 128" in config
    assert summary["pd"]["decode"]["blocks_in_use_at_end"] == 0


def test_a_pd_plan_asks_max_rate_of_one_split(tmp_path):
    from sim.plan.runner import run_plan
    from sim.plan.spec import PlanError, load_plan

    base = {
        "workload": "chat",
        "slo.ttft_p90_s": 0.5,
        "engine.async_scheduling": False,
        "engine.latency_model": "constant",
        "engine.constant_step_s": 0.01,
        "pd": "prefill=1,decode=1",
    }
    for bad, words in (
        ({"question": "min_kv", "rate": 4.0}, "a P/D plan asks max_rate"),
        ({"question": "max_rate", "pd": "prefill=1"}, "decode=N is required"),
    ):
        with pytest.raises(PlanError, match=words):
            load_plan(None, {**base, **bad})
    plan = load_plan(
        None,
        {
            **base,
            "question": "max_rate",
            "num_requests": 40,
            "seeds": [0],
            "search.low": 2.0,
            "search.high": 4.0,
            "search.max_probes": 2,
            "length.fixed": True,
            "length.confirm_sojourns": 0,
        },
    )
    doc = run_plan(plan, tmp_path / "plan")
    run_dir = Path(doc["probes"][0]["seeds"][0]["run_dir"])
    assert json.loads((run_dir / "summary.json").read_text())["pd"]["transfers"]["count"] == 40


# -- async scheduling (vLLM 0.33.0's default loop) -------------------------------------


@pytest.fixture(scope="module")
def async_base(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pd_async")
    trace = _trace(tmp)
    return trace, tmp, _run(trace, tmp / "base", PDSpec(1, 2), async_scheduling=True)


def test_async_pd_run_completes_and_splits_ttft(async_base):
    """Both roles with the batch queue: every request finishes (the scheduler's
    invariants checked after every step, deferred frees included), the TTFT split adds
    up, every block is read once and both pools free every block."""
    _, tmp, (summary, rows) = async_base
    assert len(rows) == 8 and summary["num_finished"] == 8
    for r in rows:
        ttft = float(r["first_token_s"]) - float(r["arrival_s"])
        parts = sum(
            float(r[k]) for k in ("prefill_queue_s", "prefill_s", "transfer_s", "decode_queue_s")
        )
        assert parts == pytest.approx(ttft, abs=1e-7)
        assert float(r["transfer_s"]) > 0 and float(r["prefill_s"]) >= STEP_S - 1e-9
        assert int(r["transfer_blocks"]) == -(-int(r["prompt_tokens"]) // 16)
    pd = summary["pd"]
    assert pd["transfers"]["count"] == 8
    assert pd["prefill"]["blocks_in_use_at_end"] == 0
    assert pd["decode"]["blocks_in_use_at_end"] == 0
    config = (tmp / "base" / "config.yaml").read_text()
    assert "NixlConnector worker side per batch" in config


def test_async_pd_same_inputs_same_bytes(async_base):
    trace, tmp, _ = async_base
    a, b = tmp / "a", tmp / "b"
    _run(trace, a, PDSpec(2, 1), async_scheduling=True)
    _run(trace, b, PDSpec(2, 1), async_scheduling=True)
    for name in ("requests.csv", "steps.csv", "config.yaml"):
        assert (a / name).read_bytes() == (b / name).read_bytes()


def test_async_pd_ttft_lags_the_synchronous_loop(base, async_base):
    """At this low load no request gets its first token earlier than with the
    synchronous loop, and some later (a batch is planned while the one before runs);
    the first one, on idle instances, is as early."""
    _, _, (sync, sync_rows) = base
    _, _, (asyn, async_rows) = async_base
    first = {r["request_id"]: float(r["first_token_s"]) for r in sync_rows}
    for r in async_rows:
        assert float(r["first_token_s"]) >= first[r["request_id"]] - 1e-9
    assert asyn["ttft_s"]["mean"] > sync["ttft_s"]["mean"]
    r0 = next(r for r in async_rows if r["request_id"] == "r0")
    assert float(r0["first_token_s"]) == pytest.approx(first["r0"], abs=1e-9)


def test_async_pd_a_read_reaches_the_decode_scheduler_with_its_batch_output(tmp_path):
    """Hand-computed, one request at 0 then another at 0.05 s, 40-token prompts
    (3 blocks, a read of 20 us + 3 x 2 MiB / 50 GB/s), constant 10 ms steps.

    ``x`` (idle instances): prefill batch [0, 0.01); handed over at 0.01; the decode
    instance's first batch allocates and posts the read at 0.01 (no token: it runs at
    once), the engine sleeps until the read ends, a batch applied then reports it and
    the next one planned computes the last prompt token: first token at 0.01 + read +
    0.01, as in the synchronous loop.

    ``y`` arrives at 0.05 while ``x`` decodes: two decode steps later than the
    synchronous loop (one for joining while a batch is planned ahead, one for the
    read's report)."""
    read_s = 20e-6 + 3 * BLOCK_BYTES / 50e9
    rows = [
        {
            "request_id": "x",
            "arrival_s": 0.0,
            "prompt_token_ids": list(range(1, 41)),
            "output_tokens": 40,
        },
        {
            "request_id": "y",
            "arrival_s": 0.05,
            "prompt_token_ids": list(range(101, 141)),
            "output_tokens": 2,
        },
    ]
    trace = write_jsonl(tmp_path / "two.jsonl", rows)
    got = {}
    for asy in (False, True):
        _, out = _run(trace, tmp_path / str(asy), PDSpec(1, 1), async_scheduling=asy)
        got[asy] = {r["request_id"]: r for r in out}
    for asy in (False, True):
        x = got[asy]["x"]
        assert float(x["first_token_s"]) == pytest.approx(0.01 + read_s + STEP_S, abs=1e-8)
    # The decode instance's steps run back to back from 0.01 + read_s, 10 ms each.
    step = [0.01 + read_s + STEP_S * k for k in range(12)]
    # Synchronous: y (prefilled [0.05, 0.06)) joins at the end of step 4 (step[5]),
    # step 5 posts its read, reported at step 5's end; step 6 computes y.
    y = got[False]["y"]
    assert float(y["first_token_s"]) == pytest.approx(step[7], abs=1e-8)
    # Async: batch 5 was planned at step[4]; y is added when batch 4's output is
    # applied (step[5]) and allocated in batch 6, which posts the read at its GPU
    # start (step[6]); the read is reported with batch 6's output (step[7]), after
    # batch 7 was planned; batch 8 computes y.
    y = got[True]["y"]
    assert float(y["first_token_s"]) == pytest.approx(step[9], abs=1e-8)
    assert float(y["prefill_s"]) == pytest.approx(STEP_S, abs=1e-8)
    assert float(y["transfer_s"]) == pytest.approx(read_s, abs=1e-8)
    assert float(y["decode_queue_s"]) == pytest.approx(4 * STEP_S, abs=1e-8)
    assert float(got[False]["y"]["decode_queue_s"]) == pytest.approx(2 * STEP_S, abs=1e-8)


def test_async_pd_under_kv_pressure_preempts_and_frees_everything(tmp_path):
    """30 requests on 48-block instances: the decode instance preempts (its frees
    deferred while batches are in flight), the scheduler's invariants hold after every
    step of both instances, every request finishes and both pools end with every
    block free, in either loop."""
    rows = [
        {
            "request_id": f"r{i}",
            "arrival_s": 0.002 * i,
            "prompt_token_ids": list(range(1 + 300 * i, 101 + 300 * i + (37 * i) % 150)),
            "output_tokens": 30 + (13 * i) % 40,
        }
        for i in range(30)
    ]
    trace = write_jsonl(tmp_path / "pressure.jsonl", rows)
    for asy in (False, True):
        summary, out = _run(
            trace,
            tmp_path / str(asy),
            PDSpec(1, 1),
            async_scheduling=asy,
            num_gpu_blocks_override=48,
            max_model_len=512,
        )
        assert summary["num_finished"] == 30
        assert sum(int(r["num_preemptions"]) for r in out) > 0
        assert summary["pd"]["decode"]["blocks_in_use_at_end"] == 0
        assert summary["pd"]["prefill"]["blocks_in_use_at_end"] == 0
