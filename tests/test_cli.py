"""The kvsim CLI: replay output, help, and bad-input handling (exit 2, no traceback)."""

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from sim.cli import app

runner = CliRunner()


def test_replay_writes_jsonl_file(data_dir, tmp_path):
    out = tmp_path / "r.jsonl"
    res = runner.invoke(
        app,
        [
            "replay",
            str(data_dir / "trace_shared_prefix.json"),
            "--num-gpu-blocks",
            "64",
            "--max-num-seqs",
            "8",
            "--max-num-batched-tokens",
            "256",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    ref = [json.loads(x) for x in (data_dir / "steps_shared_prefix.jsonl").open()]
    assert lines[0]["type"] == "header" and lines[-1]["type"] == "summary"
    assert [x for x in lines if x["type"] == "step"] == [x for x in ref if x["type"] == "step"]
    assert not list(tmp_path.glob(".replay-*"))  # no temporary file left behind


def test_replay_help_lists_vllm_flag_names():
    res = runner.invoke(app, ["replay", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    for flag in (
        "--block-size",
        "--num-gpu-blocks",
        "--enable-prefix-caching",
        "--long-prefill-token-threshold",
        "--scheduling-policy",
        "--kv-groups",
        "--prefix-caching-hash-algo",
        "--sample-token-id",
        "--async-scheduling",
    ):
        assert flag in res.output


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "sim.cli", *args], capture_output=True, text=True)


def test_bad_inputs_exit_2_with_one_clear_message(data_dir, tmp_path):
    trace = str(data_dir / "trace_shared_prefix.json")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('[{"request_id": 1}')
    cases = [
        ([trace, "--block-size", "0"], "block_size"),
        ([trace, "--prefix-caching-hash-algo", "md5"], "prefix_caching_hash_algo"),
        ([trace, "--max-model-len", "100"], "max_model_len"),
        ([trace, "--scheduling-policy", "lifo"], "policy"),
        ([trace, "--kv-groups", "full,mamba"], "kv_groups"),
        ([str(bad_json)], "not valid JSON"),
        ([str(tmp_path / "missing.json")], "cannot read"),
        ([trace, "--out", str(tmp_path / "no" / "such" / "dir.jsonl")], "--out"),
    ]
    for args, needle in cases:
        res = run_cli("replay", *args)
        assert res.returncode == 2, (args, res.stderr)
        assert res.stderr.startswith("kvsim: error: "), (args, res.stderr)
        assert needle in res.stderr and len(res.stderr.splitlines()) == 1, (args, res.stderr)
        assert "Traceback" not in res.stderr
    res = run_cli("replay", trace, "--block-size", "abc")  # refused by the option parser
    assert res.returncode == 2 and "--block-size" in res.stderr
    assert "Traceback" not in res.stderr


def test_replay_defaults_are_replay_config_defaults(data_dir):
    """The flags' defaults are ReplayConfig's (the header echoes every knob)."""
    from dataclasses import asdict

    from kvcore.replay import ReplayConfig, replay
    from kvcore.replay_trace import load_trace

    path = str(data_dir / "trace_shared_prefix.json")
    res = runner.invoke(app, ["replay", path])
    assert res.exit_code == 0, res.output
    header = json.loads(res.stdout.splitlines()[0])
    expected = next(iter(replay(load_trace(path), ReplayConfig(), path)))
    assert header == expected
    assert set(asdict(ReplayConfig())) - {"none_hash_seed"} <= set(header["config"])


def test_replay_async_scheduling(data_dir, tmp_path):
    """--async-scheduling replays through the batch queue: each step's output is
    applied in the step after it, and the run ends with the queue drained."""
    out = tmp_path / "a.jsonl"
    res = runner.invoke(
        app,
        [
            "replay",
            str(data_dir / "trace_shared_prefix.json"),
            "--num-gpu-blocks=64",
            "--max-num-seqs=8",
            "--max-num-batched-tokens=256",
            "--async-scheduling",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["config"]["async_scheduling"] is True
    assert lines[0]["config"]["batch_queue_size"] == 2
    steps = [x for x in lines if x["type"] == "step"]
    assert steps[0]["applied_step"] is None and steps[0]["in_flight"] == [0]
    assert all(s["applied_step"] == s["step"] - 1 for s in steps[1:])
    assert steps[-1]["in_flight"] == [] and lines[-1]["finished"] == 40


def test_conformance_bad_input_exit_2(tmp_path):
    missing = str(tmp_path / "nope" / "python")
    for args, needle in [
        (["--vllm-python", missing], "does not exist"),
        (["--vllm-python", str(tmp_path)], "not an executable"),
        (["--traces", "0", "--vllm-python", missing], "--traces"),
    ]:
        res = run_cli("conformance", *args)
        assert res.returncode == 2, (args, res.stderr)
        assert res.stderr.startswith("kvsim: error: ") and needle in res.stderr, res.stderr
        assert "Traceback" not in res.stderr


def test_run_no_report_skips_plots_and_report_until_kvsim_report(tmp_path):
    from tests.sim_run_helpers import kvsim_cli

    out = tmp_path / "batch"
    proc = kvsim_cli("run", "chat", "--num-requests", "20", "--no-report", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "summary.json").is_file() and (out / "requests.csv").is_file()
    assert not (out / "report.html").exists() and not list(out.glob("plots/*.png"))
    proc = kvsim_cli("report", str(out), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (out / "report.html").is_file() and list(out.glob("plots/*.png"))


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("3", "3")])
def test_the_command_runs_blas_with_one_thread_unless_told(
    given: str | None, expected: str
) -> None:
    """``kvsim`` sets OPENBLAS_NUM_THREADS before numpy loads; a value the user set wins."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    code = "import os, sys; import sim.cli; import numpy; print(os.environ['OPENBLAS_NUM_THREADS'])"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == expected


@pytest.mark.parametrize(("command", "collecting"), [("run", False), ("version", True)])
def test_only_kvsim_run_starts_up_without_cyclic_collections(command, collecting):
    """``kvsim run`` loads its modules with cyclic collection off (the simulation turns
    it on over what it builds: tests/test_offload.py); other commands leave it on."""
    code = (
        f"import gc, sys; sys.argv = ['kvsim', {command!r}, '--help']; import sim.cli; "
        "print(gc.isenabled())"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(collecting)
