"""Bad input to ``kvsim run``: exit 2, one line on stderr naming file/flag and field.

Each case runs ``python -m sim.cli run ...`` in a subprocess (all cases at once, in
a thread pool) with ``--out`` in a fresh folder, and must

- exit with status 2,
- print exactly one non-empty line on stderr, with no ``Traceback``,
- name the file or flag and the field (every listed substring appears in that line),
- leave that folder empty: no run directory, no ``.tmp`` leftovers.

A last test fails a run in the middle of the simulation (in process) and checks
that nothing that looks like a run directory is left behind.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from sim_run_helpers import kvsim_cli, run_sim, write_yaml

OK = "arrival: {type: poisson, rate: 1}\nprompt_len: 10\noutput_len: 5\nnum_requests: 3\n"

FILES = {
    "ok.yaml": OK,
    "eng_unknown.yaml": "block_size: 16\nfoo: 1\n",
    "eng_list.yaml": "- 1\n- 2\n",
    "eng_neg.yaml": "block_size: -16\n",
    "wl_unknown.yaml": OK + "bogus: 1\n",
    "wl_neg.yaml": OK.replace("rate: 1", "rate: -1"),
    "wl_lognormal.yaml": OK.replace("prompt_len: 10", "prompt_len: {type: lognormal, median: 9}"),
    "bad.yaml": "arrival: [unclosed\n",
    "empty.jsonl": "",
    "extra.jsonl": '{"request_id": "a", "arrival_s": 0, "prompt_tokens": 4, '
    '"output_tokens": 2, "extra": 1}\n',
    "back.jsonl": '{"request_id": "a", "arrival_s": 1.0, "prompt_tokens": 4, "output_tokens": 2}\n'
    '{"request_id": "b", "arrival_s": 0.5, "prompt_tokens": 4, "output_tokens": 2}\n',
    "az_missing.csv": "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,374\n",
    "bg_missing.csv": "Timestamp,Model,Request tokens\n5,ChatGPT,472\n",
    "gpu_bad.yaml": "name: NoSpecs\n",
    "notes.txt": "hello\n",
}

# (id, args, substrings that the one stderr line must contain)
CASES = [
    (
        "engine-unknown-key",
        ["ok.yaml", "--engine", "eng_unknown.yaml"],
        ["eng_unknown.yaml", "foo", "unknown key"],
    ),
    ("engine-not-mapping", ["ok.yaml", "--engine", "eng_list.yaml"], ["eng_list.yaml"]),
    (
        "engine-negative-block",
        ["ok.yaml", "--engine", "eng_neg.yaml"],
        ["eng_neg.yaml", "block_size"],
    ),
    ("engine-missing-file", ["ok.yaml", "--engine", "nope.yaml"], ["nope.yaml"]),
    ("workload-unknown-key", ["wl_unknown.yaml"], ["wl_unknown.yaml", "bogus", "unknown key"]),
    ("negative-rate", ["wl_neg.yaml"], ["wl_neg.yaml", "arrival.rate"]),
    ("lognormal-underspecified", ["wl_lognormal.yaml"], ["wl_lognormal.yaml", "prompt_len"]),
    ("malformed-yaml", ["bad.yaml"], ["bad.yaml", "line"]),
    ("missing-workload", ["missing.yaml"], ["missing.yaml"]),
    ("unknown-file-type", ["notes.txt"], ["notes.txt", ".txt"]),
    ("empty-trace", ["empty.jsonl"], ["empty.jsonl", "no requests"]),
    ("trace-unknown-field", ["extra.jsonl"], ["extra.jsonl", "line 1", "extra"]),
    ("trace-time-goes-back", ["back.jsonl"], ["back.jsonl", "line 2", "arrival_s"]),
    ("azure-missing-column", ["az_missing.csv"], ["az_missing.csv", "GeneratedTokens"]),
    ("burstgpt-missing-column", ["bg_missing.csv"], ["bg_missing.csv", "Response tokens"]),
    ("unknown-model", ["ok.yaml", "--model", "Llama-9000"], ["model", "Llama-9000"]),
    ("missing-model-config", ["ok.yaml", "--model", "no/config.json"], ["model", "config.json"]),
    ("unknown-gpu", ["ok.yaml", "--gpu", "TPU-v9"], ["gpu", "TPU-v9"]),
    ("gpu-yaml-missing-fields", ["ok.yaml", "--gpu", "gpu_bad.yaml"], ["gpu_bad.yaml", "memory"]),
    (
        "request-cannot-fit-kv-cache",
        ["ok.yaml", "--num-gpu-blocks-override", "2", "--max-model-len", "8192"],
        ["max_model_len", "num_gpu_blocks_override"],
    ),
    (
        "no-memory-for-kv-cache",
        ["ok.yaml", "--gpu-memory-utilization", "0.01"],
        ["gpu_memory_utilization"],
    ),
    (
        "bad-scheduling-policy",
        ["ok.yaml", "--scheduling-policy", "lifo"],
        ["scheduling_policy", "lifo"],
    ),
    ("bad-kv-cache-dtype", ["ok.yaml", "--kv-cache-dtype", "fp4"], ["kv_cache_dtype", "fp4"]),
    ("bad-latency-model", ["ok.yaml", "--latency-model", "magic"], ["latency_model", "magic"]),
    (
        "gpu-memory-utilization-above-1",
        ["ok.yaml", "--gpu-memory-utilization", "1.5"],
        ["gpu_memory_utilization"],
    ),
    ("max-num-seqs-zero", ["ok.yaml", "--max-num-seqs", "0"], ["max_num_seqs"]),
    ("negative-seed", ["ok.yaml", "--seed", "-1"], ["seed"]),
    ("calibration-file", ["ok.yaml", "--calibration", "some-file"], ["--calibration", "some-file"]),
    (
        "unchunked-batch-below-model-len",
        [
            "ok.yaml",
            "--no-enable-chunked-prefill",
            "--max-num-batched-tokens",
            "2048",
            "--max-model-len",
            "4096",
            "--max-num-seqs",
            "256",
        ],
        ["max_num_batched_tokens", "max_model_len", "chunked"],
    ),
    (
        "kv-offloading-size-zero",
        ["ok.yaml", "--kv-offloading-size", "0", "--no-async-scheduling"],
        ["kv_offloading_size", "greater than 0"],
    ),
    (
        "tensor-parallel-not-dividing-heads",
        ["ok.yaml", "--tensor-parallel-size", "3"],
        ["tensor_parallel_size"],
    ),
]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    base = tmp_path_factory.mktemp("bad")
    for name, text in FILES.items():
        (base / name).write_text(text)

    def one(case):
        case_id, args, _ = case
        folder = base / "out" / case_id
        folder.mkdir(parents=True)
        proc = kvsim_cli("run", *args, "--out", str(folder / "run"), cwd=base, timeout=60)
        return case_id, (proc, folder)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(one, CASES))


def test_at_least_15_cases():
    """The issue asks for at least 15 distinct bad inputs."""
    assert len({c[0] for c in CASES}) == len(CASES) >= 15


@pytest.mark.parametrize(("case_id", "args", "needles"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line(results, case_id, args, needles):
    """Exit 2; one stderr line, no traceback, naming file/flag and field; no output dir."""
    proc, folder = results[case_id]
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert list(folder.iterdir()) == [], "a failed run left files behind"


def test_malformed_engine_yaml_is_one_line(tmp_path):
    """A malformed --engine file gives one stderr line naming the file and the line."""
    (tmp_path / "ok.yaml").write_text(OK)
    (tmp_path / "engine.yaml").write_text("block_size: [16\n")
    proc = kvsim_cli(
        "run", "ok.yaml", "--engine", "engine.yaml", "--out", "run", cwd=tmp_path, timeout=60
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, proc.stderr
    assert "engine.yaml" in lines[0] and "line" in lines[0]


def test_workload_that_never_fits_exits_2(tmp_path):
    """Every prompt (3000 tokens) exceeds --max-model-len 2048: exit 2, one line."""
    write_yaml(
        tmp_path / "long.yaml",
        {
            "arrival": {"type": "poisson", "rate": 1.0},
            "prompt_len": 3000,
            "output_len": 5,
            "num_requests": 3,
        },
    )
    proc = kvsim_cli(
        "run", "long.yaml", "--max-model-len", "2048", "--out", "run", cwd=tmp_path, timeout=60
    )
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2, proc.stdout
    assert len(lines) == 1 and "max_model_len" in lines[0] and "long.yaml" in lines[0]
    assert not (tmp_path / "run").exists()


class _FailingLatency:
    """A constant 10 ms model that raises on its 10th call: a run that dies mid-way."""

    def __init__(self) -> None:
        from calibrate.latency import make_latency_model

        self._inner = make_latency_model("constant", step_s=0.01)
        self.calls = 0

    def _tick(self) -> None:
        self.calls += 1
        if self.calls == 10:
            raise RuntimeError("latency model failed")

    def step_time(self, new_tokens, context_tokens):
        self._tick()
        return self._inner.step_time(new_tokens, context_tokens)

    def decode_step_times(self, *args, **kwargs):
        self._tick()
        return self._inner.decode_step_times(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_failed_run_leaves_no_directory(tmp_path):
    """A run that raises mid-simulation leaves neither --out nor a .tmp folder."""
    from sim.app.engine_config import EngineConfig
    from sim.app.run import RunSpec, run
    from sim.app.setup import resolve_run

    workload = write_yaml(
        tmp_path / "w.yaml",
        {
            "arrival": {"type": "poisson", "rate": 5.0},
            "prompt_len": 50,
            "output_len": 40,
            "num_requests": 20,
        },
    )
    parent = tmp_path / "runs"
    parent.mkdir()
    spec = RunSpec(workload=str(workload), engine=EngineConfig(max_model_len=1024))
    resolved = resolve_run(spec)
    resolved.latency_model = _FailingLatency()
    with pytest.raises(RuntimeError, match="latency model failed"):
        run(spec, parent / "out", resolved=resolved)
    assert list(parent.iterdir()) == []
    # A good run in the same place then works and leaves only its directory.
    run_sim(workload, parent / "out", max_model_len=1024)
    assert [p.name for p in parent.iterdir()] == ["out"]
    assert (parent / "out" / "summary.json").exists()
