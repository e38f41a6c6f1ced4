"""``kvsim export`` / ``kvsim run --export``: a run as vLLM 0.33.0's ``vllm bench serve
--save-result`` JSON and as GuideLLM's ``benchmarks.json``.

The vLLM export's keys are checked against the field list checked in at
:mod:`sim.interop.vllm_fields`; where vLLM 0.33.0's source is installed (``.venv-vllm``)
that list is read from ``vllm/benchmarks/serve.py`` and must agree, and vLLM's own
``calculate_metrics`` recomputes the figures from the same requests.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from sim_run_helpers import REPO, kvsim_cli, write_jsonl

from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec, run
from sim.interop.guidellm_stats import PERCENTILE_LEVELS
from sim.interop.run_dir import read_run
from sim.interop.stats import repeated_percentiles
from sim.interop.vllm_fields import (
    CHECKED_IN,
    GENERATION_METRICS,
    fields_from_source,
    saved_fields,
)

VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
SERVE_PY = sorted(REPO.glob(".venv-vllm/lib/python*/site-packages/vllm/benchmarks/serve.py"))
GOODPUT = {"ttft": 40.0, "tpot": 20.0}


def _trace(path: Path) -> Path:
    """90 requests every 40 ms; every 9th has one output token, one prompt is too long
    for max_model_len 2048 (rejected: vLLM's client counts it as failed)."""
    rows = []
    for i in range(90):
        rows.append(
            {
                "request_id": f"r{i:03d}",
                "arrival_s": round(0.04 * i, 3),
                "prompt_tokens": 3000 if i == 50 else 64 + 37 * (i % 23),
                "output_tokens": 1 if i % 9 == 0 else 8 + 13 * (i % 17),
            }
        )
    return write_jsonl(path, rows)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("export")
    spec = RunSpec(
        workload=str(_trace(tmp / "trace.jsonl")),
        engine=EngineConfig(max_model_len=2048, max_num_seqs=16),
        goodput=GOODPUT,
    )
    run(spec, tmp / "run", render=False)
    return tmp / "run"


def _export(run_dir: Path, out: Path, *args: str) -> dict:
    res = kvsim_cli("export", str(run_dir), "--out", str(out), *args)
    assert res.returncode == 0, res.stderr
    return json.loads(out.read_text())


def test_vllm_export_has_exactly_vllms_fields(run_dir, tmp_path):
    doc = _export(run_dir, tmp_path / "v.json", "--metric-percentiles", "50,90,99.9")
    expected = saved_fields(GENERATION_METRICS, (50.0, 90.0, 99.9)) + ["kvsim_version"]
    assert list(doc) == expected
    assert "p99.9_itl_ms" in doc and "generated_texts" not in doc


@pytest.mark.skipif(not SERVE_PY, reason="oracle environment .venv-vllm (vLLM 0.33.0) missing")
def test_checked_in_field_list_is_vllms():
    assert fields_from_source(SERVE_PY[0]) == CHECKED_IN


def test_vllm_export_figures_come_from_the_records(run_dir, tmp_path):
    doc = _export(run_dir, tmp_path / "v.json")
    data = read_run(run_dir).client()  # the client-side times the tools measure
    summary = json.loads((run_dir / "summary.json").read_text())
    assert doc["completed"] == data.num_finished == 89 and doc["failed"] == 1
    assert doc["num_prompts"] == 90 and doc["duration"] == summary["sim_duration_s"]
    assert doc["request_throughput"] == pytest.approx(89 / doc["duration"])
    assert doc["total_output_tokens"] == int(data.output_tokens.sum())
    assert doc["latencies"] == pytest.approx(list(data.e2e_s))
    assert np.all(np.diff(data.arrival_s) >= 0)  # vLLM lists requests in sending order
    assert doc["mean_ttft_ms"] == pytest.approx(1e3 * data.ttft_s.mean())
    assert doc["std_e2el_ms"] == pytest.approx(1e3 * data.e2e_s.std())
    many = data.output_tokens > 1
    tpot = (data.finish_s - data.first_token_s)[many] / (data.output_tokens[many] - 1)
    assert doc["p99_tpot_ms"] == pytest.approx(1e3 * np.percentile(tpot, 99))
    decode = (data.finish_s - data.first_token_s)[many].sum()
    assert doc["mean_itl_ms"] == pytest.approx(1e3 * decode / (data.output_tokens[many] - 1).sum())
    good = (data.ttft_s <= 0.040) & (
        ~many
        | ((data.finish_s - data.first_token_s) / np.maximum(data.output_tokens - 1, 1) <= 0.020)
    )
    assert doc["request_goodput"] == pytest.approx(good.sum() / doc["duration"])
    assert 0 < doc["request_goodput"] < doc["request_throughput"]


VLLM_METRICS = r"""
import json, sys
from vllm.benchmarks.serve import calculate_metrics
from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput
d = json.load(sys.stdin)
outs = []
for r in d["requests"]:
    n = r["output_tokens"]
    gap = (r["finish"] - r["first"]) / (n - 1) if n > 1 else 0.0
    outs.append(RequestFuncOutput(success=True, latency=r["finish"] - r["start"],
        output_tokens=n, ttft=r["first"] - r["start"], itl=[gap] * (n - 1),
        prompt_len=r["prompt"], start_time=r["start"]))
m, _ = calculate_metrics([], outs, d["duration"], None, [99.0], d["goodput"])
print(json.dumps({k: v for k, v in vars(m).items() if not k.startswith("percentiles")}
    | {"p99_" + name + "_ms": dict(getattr(m, "percentiles_" + name + "_ms"))[99.0]
       for name in ("ttft", "tpot", "itl", "e2el")}))
"""


@pytest.mark.skipif(
    not VLLM_PYTHON.exists(), reason="oracle environment .venv-vllm (vLLM 0.33.0) missing"
)
def test_vllms_calculate_metrics_gives_the_same_figures(run_dir, tmp_path):
    doc = _export(run_dir, tmp_path / "v.json")
    data = read_run(run_dir).client()  # the client-side times the tools measure
    requests = [
        {"start": a, "first": f, "finish": e, "output_tokens": int(n), "prompt": int(p)}
        for a, f, e, n, p in zip(
            data.arrival_s,
            data.first_token_s,
            data.finish_s,
            data.output_tokens,
            data.prompt_tokens,
        )
    ]
    payload = {"requests": requests, "duration": doc["duration"], "goodput": GOODPUT}
    res = subprocess.run(
        [str(VLLM_PYTHON), "-c", VLLM_METRICS],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    vllm = json.loads(res.stdout.strip().splitlines()[-1])
    keys = [k for k in vllm if k in doc and k not in ("failed",)]
    assert {"max_output_tokens_per_s", "max_concurrent_requests", "request_goodput"} <= set(keys)
    assert {
        f"{s}_{m}_ms" for s in ("mean", "median", "std", "p99") for m in GENERATION_METRICS
    } <= set(keys)
    for key in keys:
        assert doc[key] == pytest.approx(vllm[key], rel=1e-9, abs=1e-9), key
    assert doc["total_input_tokens"] == vllm["total_input"]


def test_guidellm_export_shape_and_figures(run_dir, tmp_path):
    doc = _export(run_dir, tmp_path / "g.json", "--format", "guidellm")
    assert doc["metadata"]["version"] == 2 and doc["metadata"]["kvsim_version"]
    (bench,) = doc["benchmarks"]
    assert bench["type_"] == "generative_benchmark"
    m = bench["metrics"]
    assert m["request_totals"] == {"successful": 89, "incomplete": 0, "errored": 1, "total": 90}
    dist_keys = {"mean", "median", "mode", "variance", "std_dev", "min", "max", "count",
                 "total_sum", "percentiles", "pdf"}  # fmt: skip
    for name, value in m.items():
        if name == "request_totals":
            continue
        assert set(value) == {"successful", "incomplete", "errored", "total"}, name
        assert set(value["successful"]) == dist_keys, name
        assert set(value["successful"]["percentiles"]) == set(PERCENTILE_LEVELS), name
    data = read_run(run_dir).client()  # the client-side times the tools measure
    span = bench["end_time"] - bench["start_time"]
    assert span == pytest.approx(data.finish_s.max() - data.arrival_s.min())
    # a time-weighted rate over the window averages to events / span, a concurrency to
    # the time in system / span (Little's law)
    assert m["requests_per_second"]["successful"]["mean"] == pytest.approx(89 / span)
    concurrency = m["request_concurrency"]["successful"]["mean"]
    assert concurrency == pytest.approx(data.e2e_s.sum() / span, rel=1e-5)  # float sums
    vllm = _export(run_dir, tmp_path / "v.json")
    assert m["inter_token_latency_ms"]["successful"]["mean"] == pytest.approx(vllm["mean_itl_ms"])
    assert m["request_latency"]["successful"]["mean"] == pytest.approx(vllm["mean_e2el_ms"] / 1e3)
    ttft = np.sort(data.ttft_s * 1e3)
    assert m["time_to_first_token_ms"]["successful"]["percentiles"]["p50"] == ttft[44]


def test_export_never_overwrites_a_file_it_did_not_write(run_dir, tmp_path):
    mine = tmp_path / "mine.json"
    mine.write_text('{"completed": 3}')
    res = kvsim_cli("export", str(run_dir), "--out", str(mine))
    assert res.returncode == 2 and "kvsim: error: --out" in res.stderr
    assert "Traceback" not in res.stderr and mine.read_text() == '{"completed": 3}'
    _export(run_dir, tmp_path / "v.json")
    _export(run_dir, tmp_path / "v.json", "--metric-percentiles", "50")  # its own: replaced
    assert "p50_ttft_ms" in json.loads((tmp_path / "v.json").read_text())


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--format", "csv"], "--format: unknown format 'csv' (allowed: vllm-bench, guidellm)"),
        (["--metric-percentiles", "50,x"], "--metric-percentiles: 'x' is not a percentile"),
        (["--metric-percentiles", "101"], "--metric-percentiles: '101' is not a percentile"),
    ],
)
def test_bad_export_options_exit_2(run_dir, tmp_path, args, needle):
    res = kvsim_cli("export", str(run_dir), "--out", str(tmp_path / "x.json"), *args)
    assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "x.json").exists()


def test_export_of_a_directory_that_is_no_run(tmp_path):
    res = kvsim_cli("export", str(tmp_path))
    assert res.returncode == 2 and "summary.json: missing" in res.stderr


def test_run_export_writes_both_files_and_a_rerun_replaces_them(tmp_path):
    out = tmp_path / "run"
    args = ["run", "chat", "--num-requests", "40", "--out", str(out)]
    res = kvsim_cli(*args, "--export", "vllm-bench", "--export", "guidellm")
    assert res.returncode == 0, res.stderr
    assert json.loads((out / "vllm-bench.json").read_text())["completed"] == 40
    assert json.loads((out / "guidellm-benchmarks.json").read_text())["benchmarks"]
    res = kvsim_cli(*args)  # the same directory again: kvsim's own, replaced whole
    assert res.returncode == 0, res.stderr
    assert not (out / "vllm-bench.json").exists()
    bad = kvsim_cli("run", "chat", "--out", str(tmp_path / "other"), "--export", "csv")
    assert bad.returncode == 2 and "--export: unknown format 'csv'" in bad.stderr
    assert not (tmp_path / "other").exists()  # refused before simulating


def test_repeated_percentiles_are_numpys():
    rng = np.random.default_rng(3)
    for _ in range(50):
        values = rng.normal(size=rng.integers(1, 30))
        counts = rng.integers(0, 5, size=values.size)
        counts[0] += 1
        qs = [0, 1, 25, 50, 90, 99, 99.9, 100]
        expected = np.percentile(np.repeat(values, counts), qs)
        assert repeated_percentiles(values, counts, qs) == pytest.approx(expected)


def test_client_side_times_add_the_frontend_to_engine_side_ones(run_dir):
    """Exports are client-side: each request's first and last token later by the API
    server's costs that config.yaml records; TPOT unchanged."""
    engine = read_run(run_dir)
    client = engine.client()
    front = engine.config["frontend"]
    delay = front["request_s"] + front["per_prompt_token_s"] * engine.prompt_tokens
    assert front["request_s"] > 0
    np.testing.assert_allclose(client.ttft_s - engine.ttft_s, delay)
    np.testing.assert_allclose(client.e2e_s - engine.e2e_s, delay)
    np.testing.assert_allclose(client.tpot_s, engine.tpot_s)
    summary = engine.summary
    assert summary["client"]["ttft_s"]["mean"] == pytest.approx(
        summary["ttft_s"]["mean"] + delay.mean()
    )
