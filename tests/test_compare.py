"""``kvsim compare REAL SIM_DIR``: real and simulated figures side by side.

The real side of an LLMServingSim run (a real vLLM 0.19 run, ``tests/data/
llmservingsim/``) must reproduce that repository's own vLLM column of ``summary.txt``;
a run compared with its own export has no error; a real file with known offsets gives
exactly those signed errors.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sim_run_helpers import REPO, kvsim_cli

from sim.interop.compare import compare
from sim.interop.real import read_real
from sim.interop.run_dir import read_run

GT = REPO / "tests" / "data" / "llmservingsim" / "RTXPRO6000_Llama-3.1-8B"
PRO6000 = "RTX-PRO-6000"


@pytest.fixture(scope="module")
def gt_run(tmp_path_factory) -> Path:
    """The real run's requests replayed through kvsim with its settings."""
    out = tmp_path_factory.mktemp("gt") / "run"
    res = kvsim_cli(
        "run", str(GT / "requests.jsonl"), "--gpu", PRO6000, "--max-num-seqs", "128",
        "--max-num-batched-tokens", "2048", "--gpu-memory-utilization", "0.9",
        "--out", str(out), "--export", "vllm-bench", "--export", "guidellm",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return out


def _json(*args: str) -> dict:
    res = kvsim_cli("compare", *args, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _summary_txt() -> dict[str, float]:
    """The vLLM column of the authors' summary.txt: ``{"TTFT mean": ms, ...}``."""
    out = {}
    for line in (GT / "summary.txt").read_text().splitlines():
        m = re.match(r"^(TTFT|TPOT|Latency) (Mean|Median|P\d+)\s+([\d.]+)\s", line)
        if m:
            out[f"{m.group(1).replace('Latency', 'latency')} {m.group(2).lower()}"] = float(
                m.group(3)
            )
    return out


def test_llmservingsim_real_side_reproduces_the_authors_vllm_column(gt_run):
    doc = _json(str(GT), str(gt_run))
    assert doc["kind"] == "llmservingsim"
    rows = {r["metric"].removesuffix(" (ms)"): r for r in doc["rows"]}
    expected = _summary_txt()
    assert len(expected) == 15
    for name, value in expected.items():
        assert rows[name]["real"] == pytest.approx(value, abs=0.05), name
    assert rows["requests"]["real"] == rows["requests"]["sim"] == 300
    assert doc["notes"] == []  # the same 300 requests, token for token
    for r in doc["rows"]:
        assert r["error_pct"] == pytest.approx((r["sim"] - r["real"]) / abs(r["real"]) * 100)


def test_the_table_prints_every_row_with_a_signed_error(gt_run):
    res = kvsim_cli("compare", str(GT), str(gt_run))
    assert res.returncode == 0, res.stderr
    assert "real (llmservingsim) against sim" in res.stdout
    lines = [x for x in res.stdout.splitlines() if "TTFT p99 (ms)" in x or "TPOT mean (ms)" in x]
    assert len(lines) == 2 and all(re.search(r"[+-]\d+\.\d%", x) for x in lines)


@pytest.mark.parametrize("fmt", ["vllm-bench.json", "guidellm-benchmarks.json"])
def test_a_run_against_its_own_export_has_no_error(gt_run, fmt):
    doc = _json(str(gt_run / fmt), str(gt_run))
    assert doc["kind"] == ("vllm-bench" if fmt.startswith("vllm") else "guidellm")
    assert len(doc["rows"]) >= 15 and doc["notes"] == []
    for r in doc["rows"]:
        assert r["error_pct"] in (None, pytest.approx(0.0, abs=1e-9)), r


def test_known_offsets_give_those_errors(gt_run, tmp_path):
    real = json.loads((gt_run / "vllm-bench.json").read_text())
    real["mean_ttft_ms"] *= 2.0  # kvsim is then 50% below
    real["p99_tpot_ms"] *= 0.8  # and 25% above
    real["p90_e2el_ms"] = real["p99_e2el_ms"]  # a percentile the export did not write
    path = tmp_path / "real.json"
    path.write_text(json.dumps(real))
    rows = {r["metric"]: r for r in _json(str(path), str(gt_run))["rows"]}
    assert rows["TTFT mean (ms)"]["error_pct"] == pytest.approx(-50.0)
    assert rows["TPOT p99 (ms)"]["error_pct"] == pytest.approx(25.0)
    sim_p90 = rows["E2EL p90 (ms)"]["sim"]  # computed for the real file's percentile
    assert sim_p90 < rows["E2EL p99 (ms)"]["sim"] and rows["E2EL p90 (ms)"]["error_pct"] < 0


def test_appended_vllm_results_and_guidellm_benchmarks_pick_by_index(gt_run, tmp_path):
    one = json.loads((gt_run / "vllm-bench.json").read_text())
    two = dict(one, completed=one["completed"] // 2)
    path = tmp_path / "appended.json"
    path.write_text(json.dumps(one) + "\n" + json.dumps(two))
    assert (
        read_real(path, 1).data["completed"] == one["completed"] // 2 and read_real(path).count == 2
    )
    c = compare(read_real(path, 1), read_run(gt_run))
    assert any("finished" in n for n in c.notes)
    res = kvsim_cli("compare", str(path), str(gt_run), "--benchmark", "5")
    assert res.returncode == 2 and "--benchmark 5: the file holds 2 results" in res.stderr


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"hello": 1}', "not a result kvsim compare reads"),
        ("not json at all", "line 1: not valid JSON"),
    ],
)
def test_bad_real_files_exit_2(gt_run, tmp_path, content, needle):
    path = tmp_path / "real.json"
    path.write_text(content)
    res = kvsim_cli("compare", str(path), str(gt_run))
    assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr


def test_compare_needs_a_run_directory(tmp_path):
    res = kvsim_cli("compare", str(GT), str(tmp_path))
    assert res.returncode == 2 and "summary.json: missing" in res.stderr


def test_llmservingsim_log_replays_as_a_trace(gt_run):
    data = read_run(gt_run)
    lines = [json.loads(x) for x in (GT / "requests.jsonl").read_text().splitlines()]
    by_id = {x["request_id"]: x for x in lines}
    t0 = lines[0]["arrival_time"]
    assert sorted(data.request_id) == sorted(by_id)
    for rid, arrival, prompt, out in zip(
        data.request_id, data.arrival_s, data.prompt_tokens, data.output_tokens
    ):
        src = by_id[rid]
        assert arrival == pytest.approx(src["arrival_time"] - t0, abs=1e-6)
        assert (prompt, out) == (src["input_toks"], src["output_toks"])


def test_a_bad_llmservingsim_line_names_the_line_and_field(tmp_path):
    lines = (GT / "requests.jsonl").read_text().splitlines()[:3]
    bad = json.loads(lines[2])
    del bad["output_toks"]
    trace = tmp_path / "requests.jsonl"
    trace.write_text("\n".join([*lines[:2], json.dumps(bad)]) + "\n")
    res = kvsim_cli("run", str(trace), "--out", str(tmp_path / "run"))
    assert res.returncode == 2 and "line 3: output_toks" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "run").exists()
