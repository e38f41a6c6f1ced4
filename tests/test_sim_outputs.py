"""A run directory holds every file INTERFACES.md lists, and report.html escapes inputs.

Checked exactly against INTERFACES.md ("A run's output directory"):
``summary.json`` keys (latency entries ``{mean, p50, p90, p99}``, ``kv_usage``
``{mean, p99, max}``), ``requests.csv`` columns in order, ``steps.csv`` columns in
order (INTERFACES.md's 14 first; kvsim may append extension columns after them),
``config.yaml`` (resolved configuration with seed and kvsim version), ``plots/*.png``
(KV usage, preemptions, latency distributions; real PNG files) and a self-contained
``report.html`` (inlined images, summary, config) in which a workload name and
description holding ``<script>`` appear escaped, never as markup.
"""

from __future__ import annotations

import json

import pytest
import yaml
from sim_run_helpers import read_csv, run_sim, write_yaml

SUMMARY_KEYS = {
    "num_requests",
    "num_finished",
    "sim_duration_s",
    "wall_s",
    "throughput_rps",
    "output_tokens_per_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "num_preemptions",
    "preemptions_per_request",
    "prefix_cache_hit_rate",
    "kv_usage",
    "num_gpu_blocks",
    "block_size",
    "num_steps",
}
REQUEST_COLUMNS = [
    "request_id",
    "replica",
    "arrival_s",
    "first_token_s",
    "finish_s",
    "prompt_tokens",
    "output_tokens",
    "cached_tokens",
    "num_preemptions",
]
STEP_COLUMNS = [
    "replica",
    "step",
    "start_s",
    "duration_s",
    "num_running",
    "num_waiting",
    "num_prefill_tokens",
    "num_decode_tokens",
    "num_preempted",
    "kv_usage",
    "num_free_blocks",
    "num_cached_blocks",
    "prefix_queries",
    "prefix_hits",
]
EVIL = "<script>alert('x')</script>"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("outputs")
    workload = write_yaml(
        tmp / "evil.yaml",
        {
            "name": f"evil{EVIL}",
            "description": f"desc {EVIL} & more",
            "seed": 4,
            "arrival": {"type": "poisson", "rate": 20.0},
            "shared_prefix": {"num_groups": 2, "prefix_len": 64},
            "prompt_len": {"type": "uniform", "min": 20, "max": 400},
            "output_len": {"type": "uniform", "min": 5, "max": 80},
            "num_requests": 60,
        },
    )
    out = tmp / "run"
    summary = run_sim(
        workload,
        out,
        num_gpu_blocks_override=40,
        max_model_len=512,
        max_num_seqs=16,
        max_num_batched_tokens=512,
    )
    return out, summary


def test_summary_json_keys(run_dir):
    """summary.json has every listed key, with the listed sub-keys, consistent values."""
    out, returned = run_dir
    summary = json.loads((out / "summary.json").read_text())
    assert summary == returned
    assert set(summary) >= SUMMARY_KEYS
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        assert set(summary[key]) == {"mean", "p50", "p90", "p99"}
        assert 0 < summary[key]["p50"] <= summary[key]["p90"] <= summary[key]["p99"]
    assert set(summary["kv_usage"]) == {"mean", "p99", "max"}
    assert summary["num_requests"] == summary["num_finished"] == 60
    assert summary["block_size"] == 16 and summary["num_gpu_blocks"] == 40
    assert summary["num_preemptions"] > 0
    assert 0 < summary["prefix_cache_hit_rate"] < 1
    _, steps = read_csv(out / "steps.csv")
    assert summary["num_steps"] == len(steps["step"])


def test_csv_columns_in_order(run_dir):
    """requests.csv columns exactly; steps.csv starts with INTERFACES.md's 14 columns."""
    out, _ = run_dir
    header, reqs = read_csv(out / "requests.csv")
    assert header == REQUEST_COLUMNS
    assert len(reqs["request_id"]) == 60
    header, steps = read_csv(out / "steps.csv")
    assert header[: len(STEP_COLUMNS)] == STEP_COLUMNS
    assert [int(s) for s in steps["step"]] == list(range(len(steps["step"])))


def test_config_yaml_resolved(run_dir):
    """config.yaml: seed, kvsim version, model, GPU, workload and resolved engine knobs."""
    out, _ = run_dir
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["seed"] == 4
    assert config["kvsim_version"]
    assert config["model"] == "Llama-3.1-8B" and config["gpu"] == "H100-SXM"
    assert config["workload"]["name"] == f"evil{EVIL}"
    engine = config["engine"]
    assert engine["max_model_len"] == 512 and engine["max_num_seqs"] == 16
    assert engine["num_gpu_blocks_override"] == 40 and engine["block_size"] == 16


def test_plots_written(run_dir):
    """plots/ holds real PNGs: the timeline (KV usage, queues and preemptions on one
    time axis) and the latency distributions (one replica: no replicas plot)."""
    out, _ = run_dir
    pngs = {p.stem: p for p in (out / "plots").glob("*.png")}
    assert sorted(pngs) == ["latency", "timeline"]
    for png in pngs.values():
        assert png.read_bytes()[:8] == PNG_MAGIC


def test_report_html_self_contained_and_escaped(run_dir):
    """report.html inlines every plot, shows summary and config, escapes input strings."""
    out, _ = run_dir
    page = (out / "report.html").read_text()
    assert "<script" not in page.lower()
    assert "&lt;script&gt;" in page
    assert page.count("data:image/png;base64,") == len(list((out / "plots").glob("*.png")))
    assert 'src="http' not in page and "src='http" not in page
    for key in ("num_preemptions", "prefix_cache_hit_rate", "ttft_s"):
        assert key in page
    assert "max_num_seqs" in page


def test_no_leftover_temporary_directories(run_dir):
    """After a successful run only the run directory (and the workload file) remain."""
    out, _ = run_dir
    assert sorted(p.name for p in out.parent.iterdir()) == ["evil.yaml", "run"]


def test_constant_step_run_renders_latency_plot(tmp_path, data_dir):
    """A plain constant-latency run (10 ms steps) of the kvsim trace fixture completes."""
    summary = run_sim(
        data_dir / "workloads" / "kvsim_small.jsonl",
        tmp_path / "out",
        latency_model="constant",
        constant_step_s=0.01,
    )
    assert summary["num_finished"] == 4
    assert (tmp_path / "out" / "plots" / "latency.png").exists()


def test_latency_plot_accepts_constant_tpot_up_to_rounding(tmp_path):
    """plot_latency draws TPOTs of 0.01 s and 0.01 s + 1 ulp (same run, two requests)."""
    import numpy as np
    import pandas as pd

    from reports.plots import plot_latency

    t = np.nextafter(0.01, 1.0)
    requests = pd.DataFrame(
        {
            "arrival_s": [0.0, 0.0, 0.0],
            "first_token_s": [0.0, 0.0, 0.0],
            "finish_s": [0.01, t, 0.01],
            "output_tokens": [2, 2, 2],
        }
    )
    plot_latency(requests, tmp_path / "latency.png")
    assert (tmp_path / "latency.png").read_bytes()[:8] == PNG_MAGIC
