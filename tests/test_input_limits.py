"""Inputs at and past the limits: max_model_len rejections and caps, work too large
to simulate, non-finite or inconsistent values, binary files, duplicate sweep values,
strict numbers. Each CLI case runs ``python -m sim.cli`` in a subprocess and checks
the exit status and the one ``kvsim: error:`` line (file, field, allowed values).
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
from sim_run_helpers import kvsim_cli, run_sim, write_jsonl

OK = "arrival: {type: poisson, rate: 1}\nprompt_len: 10\noutput_len: 5\nnum_requests: 3\n"


def _error_line(proc) -> str:
    """The one stderr line of a refused command (exit 2, no traceback)."""
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("kvsim: error: "), lines[0]
    return lines[0]


def _refused(tmp_path: Path, *args: str) -> str:
    return _error_line(kvsim_cli(*args, cwd=tmp_path, timeout=60))


def test_row7_huge_prompt_is_rejected_without_building_tokens(tmp_path: Path) -> None:
    """A 900,000,000-token prompt (trace, and a synthetic spec drawn ahead) is rejected
    for max_model_len at once: exit 2 naming the file and the trace line, in seconds
    (building its token ids took minutes)."""
    write_jsonl(
        tmp_path / "huge.jsonl",
        [{"request_id": "big", "arrival_s": 0.0, "prompt_tokens": 900_000_000, "output_tokens": 4}],
    )
    (tmp_path / "huge.yaml").write_text(OK.replace("prompt_len: 10", "prompt_len: 900000000"))
    for name, needles in (
        ("huge.jsonl", ["huge.jsonl: line 1: max_model_len", "'big'", "900,000,000 tokens"]),
        ("huge.yaml", ["huge.yaml: max_model_len", "all 3 requests", "'req-0'"]),
    ):
        t0 = time.perf_counter()
        line = _refused(tmp_path, "run", name, "--out", str(tmp_path / "run"))
        assert time.perf_counter() - t0 < 10, "the rejected prompt was built"
        for needle in needles:
            assert needle in line, (needle, line)
        assert "131,072" in line
    assert not (tmp_path / "run").exists()


def test_row7_rejected_request_never_builds_its_prompt(tmp_path: Path) -> None:
    """The engine decides from ``num_prompt_tokens``; a lazy prompt stays unbuilt (on
    a real cluster, so the compiled engine runs the same path as pure Python)."""
    import simpy

    from sim.app.engine_config import EngineConfig
    from sim.app.run import RunSpec
    from sim.app.setup import resolve_run
    from sim.engine.cluster import Cluster
    from sim.engine.router import make_router
    from sim.records.recorders import StepRecorder
    from sim.records.request_recorder import RequestRecorder
    from workloads.request import SimRequest

    (tmp_path / "ok.yaml").write_text(OK)
    resolved = resolve_run(
        RunSpec(workload=str(tmp_path / "ok.yaml"), engine=EngineConfig(max_model_len=100))
    )
    built = []
    request = SimRequest(
        "r",
        0.0,
        None,
        4,
        num_prompt_tokens=10**9,
        build_prompt=lambda: built.append(1) or [1],
    )
    steps = StepRecorder(tmp_path / "steps.csv")
    requests = RequestRecorder(tmp_path / "requests.csv")
    try:
        cluster = Cluster(
            simpy.Environment(), resolved, 1, make_router("round_robin"), steps, requests
        )
        assert cluster.prepare_prompt(request) is None and built == []
        cluster.submit(request)
        assert cluster.num_rejected == 1 and built == [] and not request.prompt_built
    finally:
        steps.close()
        requests.close()
    assert request.prompt_token_ids == [1] and built == [1]


def test_row8_work_far_beyond_one_machine_is_refused(tmp_path: Path) -> None:
    """1e12 requests, or 10 requests of 1e9 output tokens each (capped by vLLM at
    max_model_len, but ten 131k-token requests behind a 444k-token KV cache), are
    refused up front with the estimate and the opt-in; the opt-in skips the check."""
    (tmp_path / "many.yaml").write_text(
        OK.replace("num_requests: 3", "num_requests: 1000000000000")
    )
    (tmp_path / "long.yaml").write_text(
        OK.replace("output_len: 5", "output_len: 1000000000").replace(
            "num_requests: 3", "num_requests: 10"
        )
    )
    line = _refused(tmp_path, "run", "many.yaml", "--out", "run")
    for needle in (
        "many.yaml: work: too large",
        "1e+12 requests > 1e+07",
        "engine steps",
        "GiB of memory",
        "KVSIM_ALLOW_LARGE=1",
    ):
        assert needle in line, (needle, line)
    line = _refused(tmp_path, "run", "long.yaml", "--out", "run")
    for needle in (
        "long.yaml: work:",
        "about 10 requests",
        "1.3e+06 decode tokens",
        "max_model_len 131,072",
        "block checks",
    ):
        assert needle in line, (needle, line)

    from sim.app.run import RunSpec
    from sim.app.setup import resolve_run
    from sim.app.work_bounds import check_work_bounds, estimate_work

    with pytest.raises(ValueError, match="too large to simulate"):
        resolve_run(RunSpec(workload=str(tmp_path / "long.yaml")))
    resolved = resolve_run(RunSpec(workload=str(tmp_path / "long.yaml")), allow_large=True)
    est = estimate_work(resolved)
    assert est.requests == 10 and est.decode_tokens == 10 * (131_072 - 10)
    check_work_bounds(resolved, allow_large=True)  # the opt-in: no error
    assert resolve_run(RunSpec(workload="chat")).workload.num_requests == 1000  # presets pass


def test_row11_rejections_and_caps_are_reported(tmp_path: Path) -> None:
    """A trace where one prompt is too long and one output too long runs; the run says
    so: summary.json fields, one stderr warning per kind, summary-table rows."""
    trace = write_jsonl(
        tmp_path / "mixed.jsonl",
        [
            {"request_id": "ok", "arrival_s": 0.0, "prompt_tokens": 20, "output_tokens": 5},
            {"request_id": "long", "arrival_s": 0.1, "prompt_tokens": 64, "output_tokens": 5},
            {"request_id": "capped", "arrival_s": 0.2, "prompt_tokens": 40, "output_tokens": 1000},
            {"request_id": "long2", "arrival_s": 0.3, "prompt_tokens": 500, "output_tokens": 5},
        ],
    )
    summary = run_sim(trace, tmp_path / "run", max_model_len=64, max_num_seqs=8)
    assert summary["num_rejected"] == 2 and summary["num_finished"] == 2
    assert summary["rejected"] == {
        "prompt_too_long": 2,
        "max_model_len": 64,
        "first_request_id": "long",
        "first_line": 2,
        "first_prompt_tokens": 64,
    }
    assert summary["num_capped_outputs"] == 1
    assert summary["capped_outputs"] == {
        "max_model_len": 64,
        "first_request_id": "capped",
        "first_line": 3,
    }
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["rejected"] == summary["rejected"]
    with (tmp_path / "run" / "requests.csv").open() as f:
        rows = {r["request_id"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"ok", "capped"} and int(rows["capped"]["output_tokens"]) == 64 - 40

    proc = kvsim_cli(
        "run",
        "mixed.jsonl",
        "--max-model-len",
        "64",
        "--max-num-seqs",
        "8",
        "--out",
        "cli",
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    warnings = [
        x
        for x in proc.stderr.splitlines()
        if x.startswith("kvsim: warning:") and "measurement window" not in x
    ]
    assert len(warnings) == 2, proc.stderr
    assert "2 of 4 requests rejected" in warnings[0] and "'long' (line 2)" in warnings[0]
    assert "1 of 4 requests' outputs capped" in warnings[1] and "'capped' (line 3)" in warnings[1]
    assert "rejected: prompt >= max_model_len" in proc.stdout
    assert "outputs capped at max_model_len" in proc.stdout


def test_row12_non_finite_and_inconsistent_values_are_refused(tmp_path: Path) -> None:
    """rate .inf, a length max below its median, a block size no vLLM 0.33.0 backend
    takes: exit 2 naming file, field and what is allowed. max_num_batched_tokens below
    the block size is accepted, as vLLM accepts it."""
    files = {
        "inf.yaml": OK.replace("rate: 1", "rate: .inf"),
        "lognormal.yaml": OK.replace(
            "prompt_len: 10", "prompt_len: {type: lognormal, median: 200, p90: 900, max: 100}"
        ),
        "normal.yaml": OK.replace(
            "prompt_len: 10", "prompt_len: {type: normal, mean: 50, std: 5, max: 40}"
        ),
        "ok.yaml": OK,
        "block7.yaml": "block_size: 7\n",
        "small_batch.yaml": "max_num_batched_tokens: 8\nmax_num_seqs: 4\nblock_size: 16\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    cases = [
        (["inf.yaml"], ["inf.yaml: arrival.rate: must be a finite number (got inf)"]),
        (
            ["lognormal.yaml"],
            [
                "lognormal.yaml: prompt_len",
                "max (100) is below the median (200)",
                "max must be >= the median",
            ],
        ),
        (["normal.yaml"], ["normal.yaml: prompt_len", "max (40) is below the median (50"]),
        (
            ["ok.yaml", "--engine", "block7.yaml"],
            ["block7.yaml: block_size: must be a multiple of 16", "(got 7)"],
        ),
        (
            ["ok.yaml", "--block-size", "8"],
            ["engine flags: block_size: must be a multiple of 16", "16, 32, 64, 128"],
        ),
    ]
    for args, needles in cases:
        line = _refused(tmp_path, "run", *args, "--out", "run")
        for needle in needles:
            assert needle in line, (needle, line)
    proc = kvsim_cli(
        "run", "ok.yaml", "--engine", "small_batch.yaml", "--out", "run", cwd=tmp_path, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["num_finished"] == 3


def test_row13_binary_files_and_engine_batch_limit_name_the_file(tmp_path: Path) -> None:
    """Binary garbage as a .jsonl or .csv trace, an engine file whose
    max_num_batched_tokens < max_num_seqs: the message names the file (and line)."""
    garbage = bytes(range(128, 256)) * 8
    (tmp_path / "bin.jsonl").write_bytes(
        b'{"request_id": "a", "arrival_s": 0, "prompt_tokens": 4, "output_tokens": 2}\n' + garbage
    )
    (tmp_path / "bin.csv").write_bytes(garbage)
    (tmp_path / "ok.yaml").write_text(OK)
    (tmp_path / "eng.yaml").write_text("max_num_seqs: 64\nmax_num_batched_tokens: 32\n")
    line = _refused(tmp_path, "run", "bin.jsonl", "--out", "run")
    assert "bin.jsonl: line 2: not UTF-8 text (byte 1 of the line is 0x80)" in line, line
    line = _refused(tmp_path, "run", "bin.csv", "--out", "run")
    assert "bin.csv: line 1: not UTF-8 text" in line, line
    line = _refused(tmp_path, "run", "ok.yaml", "--engine", "eng.yaml", "--out", "run")
    assert "eng.yaml: max_num_batched_tokens: must be >= max_num_seqs (64)" in line, line
    assert "(got 32)" in line
    (tmp_path / "bin_engine.yaml").write_bytes(garbage)
    line = _refused(tmp_path, "run", "ok.yaml", "--engine", "bin_engine.yaml", "--out", "run")
    assert "bin_engine.yaml: not UTF-8 text" in line, line


def test_row14_duplicate_axis_values_are_refused(tmp_path: Path) -> None:
    """values: [2, 2] (and a zip row given twice) would run one point twice: refused at
    spec load naming the sweep file, the axis and the value."""
    (tmp_path / "ok.yaml").write_text(OK)
    (tmp_path / "dup.yaml").write_text(
        "base: {workload: ok.yaml}\naxes:\n  - {path: engine.max_num_seqs, values: [2, 4, 2]}\n"
    )
    (tmp_path / "dupzip.yaml").write_text(
        "base: {workload: ok.yaml}\nzip:\n  - - {path: engine.max_num_seqs, values: [2, 2]}\n"
        "    - {path: engine.max_num_batched_tokens, values: [64, 64]}\n"
    )
    line = _refused(tmp_path, "sweep", "dup.yaml", "--out", "sw")
    assert (
        "dup.yaml: axis 'engine.max_num_seqs': value 2 is given twice (entries 1 and 3)" in line
    ), line
    line = _refused(tmp_path, "sweep", "dupzip.yaml", "--out", "sw")
    assert (
        "dupzip.yaml: zip[0] ('engine.max_num_seqs', 'engine.max_num_batched_tokens'): "
        "value (2, 64)" in line
    )
    assert not (tmp_path / "sw").exists()


def test_row17_numbers_are_strict_everywhere(tmp_path: Path) -> None:
    """A quoted or float integer is refused in workload, engine, sweep and plan YAML,
    as in traces; a YAML integer for a float field is fine (rate: 1 runs)."""
    (tmp_path / "ok.yaml").write_text(OK)
    (tmp_path / "str.yaml").write_text(OK.replace("num_requests: 3", 'num_requests: "100"'))
    (tmp_path / "flt.yaml").write_text(OK.replace("num_requests: 3", "num_requests: 3.0"))
    (tmp_path / "eng.yaml").write_text('max_num_seqs: "64"\n')
    (tmp_path / "sweep.yaml").write_text('base: {workload: ok.yaml}\nseeds: ["1"]\n')
    (tmp_path / "plan.yaml").write_text(
        'workload: ok.yaml\nnum_requests: "100"\nquestion: max_rate\nslo: {ttft_p90_s: 1}\n'
    )
    cases = [
        (["run", "str.yaml"], "str.yaml: num_requests: must be an integer, not str (got '100')"),
        (["run", "flt.yaml"], "flt.yaml: num_requests: must be an integer, not float (got 3.0)"),
        (["run", "ok.yaml", "--engine", "eng.yaml"], "eng.yaml: max_num_seqs:"),
        (["sweep", "sweep.yaml"], "sweep.yaml: seeds[0]: must be an integer, not str (got '1')"),
        (["plan", "plan.yaml"], "plan.yaml: num_requests: must be an integer, not str (got '100')"),
    ]
    for args, needle in cases:
        line = _refused(tmp_path, *args, "--out", "out")
        assert needle in line, (needle, line)
    proc = kvsim_cli("run", "ok.yaml", "--out", "run", cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
