"""The kvsim CLI: replay output, help, and bad-input handling (exit 2, no traceback)."""

import json
import subprocess
import sys

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
    res = runner.invoke(app, ["replay", "--help"])
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
        ([str(bad_json)], "not valid JSON"),
        ([str(tmp_path / "missing.json")], "cannot read"),
        ([trace, "--block-size", "abc"], "block-size"),
    ]
    for args, needle in cases:
        res = run_cli("replay", *args)
        assert res.returncode == 2, (args, res.stderr)
        assert needle in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr


def test_python_m_kvcore_replay(data_dir):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvcore.replay",
            str(data_dir / "trace_shared_prefix.json"),
            "--num-gpu-blocks",
            "64",
            "--max-num-seqs",
            "8",
            "--max-num-batched-tokens",
            "256",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["finished"] == 40
