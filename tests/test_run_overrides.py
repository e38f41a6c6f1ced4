"""``kvsim run --rate/--num-requests/--duration``: the workload's values replaced, the
replacement recorded in ``config.yaml``, and one clear error (exit 2) naming the field
where a workload cannot take it."""

from __future__ import annotations

import json

import pytest
import yaml
from sim_run_helpers import kvsim_cli, read_csv

from workloads import WorkloadError, WorkloadOverrides, list_presets, load_spec, load_workload
from workloads.loader import PRESET_DIR
from workloads.overrides import RATED_ARRIVALS

RATED = [
    p for p in list_presets() if load_spec(PRESET_DIR / f"{p}.yaml").arrival.type in RATED_ARRIVALS
]
UNRATED = [p for p in list_presets() if p not in RATED]


def test_presets_split_into_rated_and_unrated():
    # Guards the parametrisations below: both lists must hold something.
    assert "chat" in RATED and "offline-batch" in UNRATED


@pytest.mark.parametrize("preset", RATED)
def test_rate_and_num_requests_apply_to_every_rated_preset(preset):
    w = load_workload(preset, overrides=WorkloadOverrides(rate=12, num_requests=5000))
    assert w.num_requests == 5000
    assert w.workload_spec.arrival.rate == 12.0
    assert w.spec["overrides"] == {"arrival.rate": 12.0, "num_requests": 5000}
    assert w.spec["source"] == f"preset:{preset}"


@pytest.mark.parametrize("preset", UNRATED)
def test_rate_on_a_preset_without_one_names_the_field(preset):
    with pytest.raises(WorkloadError) as err:
        load_workload(preset, overrides=WorkloadOverrides(rate=12))
    assert err.value.field == "arrival.rate" and "--rate" in str(err.value)


def test_duration_replaces_num_requests():
    w = load_workload("chat", overrides=WorkloadOverrides(duration_s=30))
    assert w.num_requests is None and w.workload_spec.duration_s == 30.0
    back = load_workload("chat", overrides=WorkloadOverrides(num_requests=7))
    assert back.num_requests == 7 and back.workload_spec.duration_s is None


@pytest.mark.parametrize(
    ("workload", "overrides", "field", "words"),
    [
        ("offline-batch", WorkloadOverrides(duration_s=10), "duration_s", "--num-requests"),
        ("chat", WorkloadOverrides(num_requests=5, duration_s=5), "num_requests", "at most one"),
        ("chat", WorkloadOverrides(rate=0), "arrival.rate", "must be > 0"),
        ("chat", WorkloadOverrides(num_requests=0), "num_requests", "must be >= 1"),
    ],
)
def test_bad_overrides_name_the_field(workload, overrides, field, words):
    with pytest.raises(WorkloadError) as err:
        load_workload(workload, overrides=overrides)
    assert err.value.field == field and words in str(err.value)


def test_no_overrides_leave_the_config_as_it_was():
    assert "overrides" not in load_workload("chat", overrides=WorkloadOverrides()).spec
    assert load_workload("chat").spec == load_workload("chat", overrides=WorkloadOverrides()).spec


def test_trace_takes_a_length_but_no_rate(data_dir):
    trace = data_dir / "workloads" / "kvsim_small.jsonl"  # arrivals 0, .25, .25, 1.5, ...
    full = load_workload(trace)
    assert full.num_requests > 3
    head = load_workload(trace, overrides=WorkloadOverrides(num_requests=3))
    assert head.num_requests == 3 and head.table.request_ids == full.table.request_ids[:3]
    assert head.spec["overrides"] == {"num_requests": 3}
    early = load_workload(trace, overrides=WorkloadOverrides(duration_s=1.0))
    assert early.num_requests == int((full.table.arrival_s < 1.0).sum()) == 3
    for bad, words in (
        (WorkloadOverrides(rate=3), "--rate"),
        (WorkloadOverrides(num_requests=full.num_requests + 1), "--num-requests"),
        (WorkloadOverrides(duration_s=0.0), "--duration"),
    ):
        with pytest.raises(WorkloadError, match=words):
            load_workload(trace, overrides=bad)


def test_cli_run_records_overrides_and_sends_that_many(tmp_path):
    out = tmp_path / "run"
    res = kvsim_cli(
        "run", "chat", "--rate", "20", "--num-requests", "60", "--latency-model", "constant",
        "--out", str(out),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["workload"]["overrides"] == {"arrival.rate": 20.0, "num_requests": 60}
    assert config["workload"]["arrival"]["rate"] == 20.0
    _, cols = read_csv(out / "requests.csv")
    assert len(cols["request_id"]) == 60
    assert json.loads((out / "summary.json").read_text())["num_requests"] == 60


def test_cli_duration_stops_arrivals(tmp_path):
    out = tmp_path / "run"
    res = kvsim_cli("run", "chat", "--duration", "5", "--latency-model", "constant",
                    "--out", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    _, cols = read_csv(out / "requests.csv")
    arrivals = [float(a) for a in cols["arrival_s"]]
    # Poisson 8 req/s for 5 s: about 40 requests, every one sent before 5 s.
    assert 15 < len(arrivals) < 80 and max(arrivals) < 5.0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["workload"]["duration_s"] == 5.0 and config["workload"]["num_requests"] is None


def test_cli_rate_on_a_burst_exits_2_naming_the_field(tmp_path):
    res = kvsim_cli("run", "offline-batch", "--rate", "12", "--out", str(tmp_path / "r"))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "arrival.rate" in lines[0] and "burst" in lines[0]
    assert "Traceback" not in res.stderr and not (tmp_path / "r").exists()
