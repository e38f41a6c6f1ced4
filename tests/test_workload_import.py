"""Workloads rebuilt from benchmark settings: ``vllm bench serve`` options and an
inference-perf config, through the library and ``python -m workloads.import_cli``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from workloads import WorkloadError, load_workload
from workloads.import_cli import main
from workloads.import_inference_perf import inference_perf_workload
from workloads.import_vllm_bench import vllm_bench_workload


def test_vllm_bench_defaults_send_everything_at_once() -> None:
    data = vllm_bench_workload([]).data
    assert data["arrival"] == {"type": "burst"}
    assert (data["prompt_len"], data["output_len"], data["num_requests"]) == (1024, 128, 1000)
    assert "shared_prefix" not in data


@pytest.mark.parametrize(
    ("options", "arrival"),
    [
        (["--request-rate", "4"], {"type": "poisson", "rate": 4.0}),
        (["--request-rate", "4", "--burstiness", "0.25"],
         {"type": "gamma", "rate": 4.0, "burstiness": 0.25}),
        (["--max-concurrency", "16"], {"type": "closed_loop", "concurrency": 16}),
        (["--request-rate", "inf", "--max-concurrency", "2"],
         {"type": "closed_loop", "concurrency": 2}),
    ],
)  # fmt: skip
def test_vllm_bench_arrivals(options: list[str], arrival: dict[str, Any]) -> None:
    imported = vllm_bench_workload(options)
    assert imported.data["arrival"] == arrival
    assert imported.notes == []


def test_vllm_bench_random_dataset_lengths_and_prefix() -> None:
    imported = vllm_bench_workload(
        ["--random-input-len", "1000", "--random-output-len", "10", "--random-range-ratio",
         '{"input": 0.5, "output": 0}', "--random-prefix-len", "64", "--num-prompts", "7",
         "--seed", "9", "--model", "m", "--save-result", "--unknown-flag", "1"]
    )  # fmt: skip
    data = imported.data
    assert data["prompt_len"] == {"type": "uniform", "min": 500, "max": 1500}
    assert data["output_len"] == 10
    assert data["shared_prefix"] == {"num_groups": 1, "prefix_len": 64}
    assert (data["num_requests"], data["seed"]) == (7, 9)
    assert imported.notes == ["ignored option --unknown-flag"]
    capped = vllm_bench_workload(["--request-rate", "3", "--max-concurrency", "8"])
    assert capped.data["arrival"] == {"type": "poisson", "rate": 3.0}
    assert "does not cap the requests in flight" in capped.notes[0]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--dataset-name", "sharegpt"], "--dataset-name: only the random dataset"),
        (["--random-range-ratio", "1.5"], "--random-range-ratio: must be in [0, 1)"),
        (["--random-range-ratio", "wide"], "--random-range-ratio: a number, or"),
        (["--request-rate", "0"], "--request-rate: must be > 0"),
        (["--num-prompts", "many"], "--num-prompts: invalid int value"),
    ],
)
def test_vllm_bench_bad_options_name_the_option(options: list[str], message: str) -> None:
    with pytest.raises(WorkloadError) as info:
        vllm_bench_workload(options)
    assert str(info.value).startswith("vllm bench serve: " + message)


PERF: dict[str, Any] = {
    "load": {
        "type": "poisson",
        "interval": 0,
        "request_timeout": 20,
        "base_seed": 11,
        "stages": [{"rate": 1, "duration": 30}, {"rate": 4.5, "duration": 10}],
    },
    "api": {"type": "completion"},
    "data": {
        "type": "shared_prefix",
        "shared_prefix": {"num_unique_system_prompts": 3, "num_users_per_system_prompt": 5,
                          "system_prompt_len": 200, "question_len": 20, "output_len": 9},
    },
}  # fmt: skip


def test_inference_perf_stages_pool_and_timeout() -> None:
    imported = inference_perf_workload(PERF, "perf.yaml")
    data = imported.data
    assert data["seed"] == 11 and data["timeout_s"] == 20.0
    assert data["prompt_pool"] == {
        "order": "shuffled",
        "groups": {"num_groups": 3, "num_prompts_per_group": 5, "system_prompt_len": 200,
                   "question_len": 20, "output_len": 9},
    }  # fmt: skip
    assert data["stages"] == [
        {"arrival": {"type": "poisson", "rate": 1}, "duration_s": 30},
        {"arrival": {"type": "poisson", "rate": 4.5}, "duration_s": 10, "start": "after_drain"},
    ]
    assert imported.notes == []
    spec = imported.check("perf.yaml")
    assert spec.prompt_len.value == 20 and spec.output_len.value == 9


def test_inference_perf_concurrent_stages_and_defaults() -> None:
    config = {"load": {"type": "concurrent",
                       "stages": [{"num_requests": 50, "concurrency_level": 4}]},
              "data": {"type": "shared_prefix"}}  # fmt: skip
    imported = inference_perf_workload(config, "c.yaml")
    assert imported.data["stages"] == [
        {"arrival": {"type": "closed_loop", "concurrency": 4}, "num_requests": 50}
    ]
    assert imported.data["prompt_pool"]["groups"]["num_groups"] == 10  # inference-perf's
    assert imported.notes == []
    config["load"]["stages"].append({"num_requests": 5, "concurrency_level": 1})
    second = inference_perf_workload(config, "c.yaml").data["stages"][1]
    assert second["start"] == "after_drain" and second["delay_s"] == 1.0  # default interval


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"load": {**PERF["load"], "type": "trace_replay"}},
         "p.yaml: load.type: cannot rebuild load type 'trace_replay' (allowed: constant, "
         "poisson, concurrent)"),
        ({"load": {**PERF["load"], "sweep": {"type": "linear"}}}, "p.yaml: load.sweep: "),
        ({"data": {"type": "shareGPT"}},
         "p.yaml: data.type: only shared_prefix data can be rebuilt"),
        ({"load": {**PERF["load"], "stages": [{"rate": -1, "duration": 5}]}},
         "p.yaml: load.stages[0].rate: must be a number > 0 for load type 'poisson'"),
        ({"load": {"type": "concurrent", "stages": [{"num_requests": 5}]}},
         "p.yaml: load.stages[0].concurrency_level: must be a number > 0"),
        ({"load": {**PERF["load"], "request_timeout": "soon"}},
         "p.yaml: load.request_timeout: must be a number > 0"),
    ],
)  # fmt: skip
def test_inference_perf_bad_configs_name_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkloadError) as info:
        inference_perf_workload({**PERF, **change}, "p.yaml")
    assert str(info.value).startswith(message), str(info.value)


def test_cli_writes_a_loadable_workload(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / "perf.yaml"
    config.write_text(yaml.safe_dump(PERF))
    out = tmp_path / "kvsim.yaml"
    assert main(["inference-perf", str(config), "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith(f"# kvsim workload built from: {config}\n")
    workload = load_workload(out)
    assert [s.arrival.rate for s in workload.workload_spec.stages] == [1.0, 4.5]
    assert main(["vllm-bench", "--", "--request-rate", "2", "--num-prompts", "5"]) == 0
    printed = capsys.readouterr().out
    assert yaml.safe_load(printed)["arrival"] == {"type": "poisson", "rate": 2.0}
    assert main(["vllm-bench", "--", "--dataset-name", "sonnet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: vllm bench serve: --dataset-name:") and "Traceback" not in err
    assert main(["inference-perf", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml: cannot read" in capsys.readouterr().err


def test_kvsim_import_workload_writes_and_never_overwrites_a_users_file(tmp_path: Path) -> None:
    from sim_run_helpers import kvsim_cli

    out = tmp_path / "bench.yaml"
    bench = ["--request-rate", "8", "--num-prompts", "10", "--random-input-len", "256"]
    res = kvsim_cli("import-workload", "vllm-bench", "--out", str(out), "--", *bench)
    assert res.returncode == 0, res.stderr
    spec = yaml.safe_load(out.read_text())
    assert spec["arrival"] == {"type": "poisson", "rate": 8.0} and spec["prompt_len"] == 256
    again = kvsim_cli(
        "import-workload", "vllm-bench", "--out", str(out), "--", "--request-rate", "9"
    )
    assert again.returncode == 0, again.stderr  # its own file: replaced
    assert yaml.safe_load(out.read_text())["arrival"]["rate"] == 9.0
    mine = tmp_path / "mine.yaml"
    mine.write_text("my: notes\n")
    res = kvsim_cli("import-workload", "vllm-bench", "--out", str(mine), "--", *bench)
    assert res.returncode == 2 and "--force" in res.stderr
    assert mine.read_text() == "my: notes\n"
    res = kvsim_cli("import-workload", "vllm-bench", "--out", str(mine), "--force", "--", *bench)
    assert res.returncode == 0 and "arrival" in mine.read_text()
