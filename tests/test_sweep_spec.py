"""Sweep specs: expansion into points, and one clear error (exit 2) for bad specs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sim_run_helpers import kvsim_cli, write_yaml

from sim.sweep import SweepSpecError, expand_points, load_sweep_spec, prepare

WORKLOAD = {
    "arrival": {"type": "poisson", "rate": 4.0},
    "prompt_len": {"type": "fixed", "value": 64},
    "output_len": {"type": "fixed", "value": 16},
    "num_requests": 20,
}


def spec_file(tmp_path: Path, **overrides: Any) -> Path:
    data: dict[str, Any] = {
        "name": "t",
        "base": {"workload": WORKLOAD, "engine": {"max_model_len": 1024}},
        "axes": [{"path": "workload.arrival.rate", "values": [2, 4]}],
    }
    data.update(overrides)
    return write_yaml(tmp_path / "sweep.yaml", data)


def test_grid_zip_and_seeds_expand_in_order(tmp_path: Path) -> None:
    path = spec_file(
        tmp_path,
        zip=[
            [
                {"path": "engine.num_gpu_blocks_override", "values": [100, 200]},
                {"path": "engine.max_num_seqs", "values": [8, 16]},
            ]
        ],
        seeds=[0, 1],
    )
    points = expand_points(load_sweep_spec(path), str(path))
    assert len(points) == 2 * 2 * 2
    first, last = points[0], points[-1]
    assert first.values == {
        "workload.arrival.rate": 2,
        "engine.num_gpu_blocks_override": 100,
        "engine.max_num_seqs": 8,
    }
    assert (first.seed, points[1].seed) == (0, 1)
    assert last.values["engine.max_num_seqs"] == 16 and last.run["engine"]["max_num_seqs"] == 16
    assert last.workload_spec["arrival"]["rate"] == 4
    assert [p.index for p in points] == list(range(8))
    assert len({p.point_id for p in points}) == 8
    again = expand_points(load_sweep_spec(path), str(path))
    assert [p.point_id for p in again] == [p.point_id for p in points]


def test_preset_is_loaded_for_editing_and_scaled(tmp_path: Path) -> None:
    path = spec_file(tmp_path, base={"workload": "chat"})
    points = expand_points(load_sweep_spec(path), str(path), scale=0.05)
    assert points[0].workload_spec["name"] == "chat"
    assert points[0].workload_spec["num_requests"] == 50
    assert points[1].workload_spec["arrival"]["rate"] == 4


def test_unswept_preset_is_passed_by_name(tmp_path: Path) -> None:
    path = spec_file(
        tmp_path,
        base={"workload": "chat"},
        axes=[{"path": "engine.max_num_seqs", "values": [8, 16]}],
    )
    points = expand_points(load_sweep_spec(path), str(path))
    assert points[0].run["workload"] == "chat" and points[0].workload_spec is None


BAD_SPECS = [
    ({"axes": [{"path": "workload.arival.rate", "values": [1]}]}, "workload.arival"),
    ({"axes": [{"path": "engine.max_num_sequences", "values": [1]}]}, "max_num_sequences"),
    ({"axes": [{"path": "workload.arrival.rate", "values": []}]}, "empty axis"),
    ({"axes": [{"path": "modell", "values": ["x"]}]}, "unknown field 'modell'"),
    ({"axes": [{"path": "engine", "values": [1]}]}, "name a field inside engine"),
    ({"axes": [{"path": "seed", "values": [1]}]}, "seeds"),
    ({"axes": [{"path": "workload.arrival.rate", "values": [-1]}]}, "must be > 0"),
    ({"axes": [{"path": "engine.block_size", "values": [16, 0]}]}, "engine.block_size"),
    ({"axes": [{"path": "model", "values": ["no-such-model"]}]}, "no-such-model"),
    ({"seeds": []}, "seeds"),
    ({"seeds": [1, 1]}, "duplicates"),
    ({"bases": {}}, "bases"),
    ({"base": {"workload": WORKLOAD, "enigne": {}}}, "enigne"),
    (
        {
            "zip": [
                [
                    {"path": "engine.max_num_seqs", "values": [1, 2]},
                    {"path": "engine.block_size", "values": [16]},
                ]
            ]
        },
        "equal numbers",
    ),
    (
        {
            "axes": [
                {"path": "workload.arrival.rate", "values": [1]},
                {"path": "workload.arrival.rate", "values": [2]},
            ]
        },
        "twice",
    ),
    ({"base": {"workload": "chat", "engine": {"num_gpu_blocks_override": 10}}}, "point 0"),
    # Cluster fields are checked with the rest of each point, before any point runs.
    ({"axes": [{"path": "router", "values": ["round_robin", "bogus"]}]}, "bogus"),
    ({"axes": [{"path": "num_replicas", "values": [1, 0]}]}, "num-replicas"),
]


@pytest.mark.parametrize(("overrides", "needle"), BAD_SPECS)
def test_bad_spec_is_one_clear_error(tmp_path: Path, overrides: dict, needle: str) -> None:
    path = spec_file(tmp_path, **overrides)
    with pytest.raises(SweepSpecError) as info:
        prepare(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert needle in message, message
    assert "\n" not in message


def test_yaml_syntax_error_and_non_mapping(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("axes: [\n")
    with pytest.raises(SweepSpecError, match="YAML syntax error"):
        load_sweep_spec(bad)
    bad.write_text("- 1\n")
    with pytest.raises(SweepSpecError, match="YAML mapping"):
        load_sweep_spec(bad)


def test_cli_bad_spec_exits_2_with_one_line(tmp_path: Path) -> None:
    path = spec_file(tmp_path, axes=[{"path": "workload.arrival.rate", "values": []}])
    proc = kvsim_cli("sweep", str(path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvsim: error: "), proc.stderr
    assert "axes[0].values: empty axis" in lines[0]
    assert not (tmp_path / "out").exists()
    missing = kvsim_cli("report", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "not a run, sweep or plan directory" in missing.stderr


def test_workload_file_is_found_next_to_the_spec(tmp_path: Path) -> None:
    write_yaml(tmp_path / "w.yaml", WORKLOAD)
    path = spec_file(tmp_path, base={"workload": "w.yaml"})
    points = expand_points(load_sweep_spec(path), str(path))
    assert points[1].workload_spec == {
        **WORKLOAD,
        "name": "t",
        "arrival": {**WORKLOAD["arrival"], "rate": 4},
    }
    unswept = spec_file(
        tmp_path, base={"workload": "w.yaml"}, axes=[{"path": "engine.max_num_seqs", "values": [4]}]
    )
    point = expand_points(load_sweep_spec(unswept), str(unswept))[0]
    assert point.run["workload"] == str((tmp_path / "w.yaml").resolve())


def test_trace_workload_fields_cannot_be_swept(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"request_id": "a", "arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2}\n'
    )
    path = spec_file(tmp_path, base={"workload": "t.jsonl"})
    with pytest.raises(
        SweepSpecError, match="base.workload: 't.jsonl' is not a preset or workload"
    ):
        prepare(path)
