"""``kvsim run`` with speculative decoding (``--speculative-config``): on the
synchronous and the default async loop, fewer engine steps per output token and a
lower TPOT than without it on the same light workload; the summary's ``spec_decode``
block adds up; same seed, same files; bad input exits 2 with one line naming the flag.

The bad-input cases fail before any scheduler is built.
"""

from __future__ import annotations

import json

import pytest
from sim_run_helpers import read_csv, write_yaml
from typer.testing import CliRunner

from reports.run_facts import spec_decode_fact
from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec, run
from sim.cli import app

WORKLOAD = {
    "arrival": {"type": "poisson", "rate": 2},
    "prompt_len": 256,
    "output_len": 48,
    "num_requests": 16,
}
NGRAM = {"method": "ngram", "num_speculative_tokens": 3}
DRAFT = {"method": "draft_model", "model": "Llama-3.2-1B", "num_speculative_tokens": 4}
EAGLE3 = {"method": "eagle3", "num_speculative_tokens": 3}


def _run(tmp_path, name, async_scheduling, spec=None, seed=3):
    """One run (no plots: they cost more than the simulation); the summary and the
    run directory."""
    wl = write_yaml(tmp_path / "wl.yaml", WORKLOAD)
    engine = {"max_model_len": 4096, "async_scheduling": async_scheduling}
    if spec is not None:
        engine["speculative_config"] = spec
    spec_ = RunSpec(workload=str(wl), engine=EngineConfig(**engine), seed=seed)
    return run(spec_, tmp_path / name, render=False), tmp_path / name


def _steps_per_token(summary):
    output_tokens = summary["output_tokens_per_s"] * summary["sim_duration_s"]
    return summary["num_steps"] / output_tokens


@pytest.mark.parametrize("async_scheduling", [False, None], ids=["sync", "async-default"])
def test_spec_decode_takes_fewer_steps_and_lowers_tpot(tmp_path, async_scheduling):
    base, _ = _run(tmp_path, "base", async_scheduling)
    assert "spec_decode" not in base
    for spec in (NGRAM, DRAFT, EAGLE3):
        with_spec, run_dir = _run(tmp_path, spec["method"], async_scheduling, spec)
        assert with_spec["num_finished"] == base["num_finished"] == WORKLOAD["num_requests"]
        assert _steps_per_token(with_spec) < 0.9 * _steps_per_token(base), spec
        assert with_spec["tpot_s"]["mean"] < base["tpot_s"]["mean"], spec
        block = with_spec["spec_decode"]
        k = spec["num_speculative_tokens"]
        assert block["method"] == spec["method"] and block["num_speculative_tokens"] == k
        assert 0 < block["num_accepted_tokens"] <= block["num_draft_tokens"]
        assert block["num_draft_tokens"] <= block["num_drafts"] * k
        assert block["tokens_per_decode"] > 1.0
        per_pos = block["acceptance_rate_per_pos"]
        assert len(per_pos) == k
        assert per_pos == sorted(per_pos, reverse=True)  # position i needs positions < i
        config = (run_dir / "config.yaml").read_text()
        assert "speculative_decoding:" in config and "fast_forward: 'off" in config


def test_same_seed_same_files_and_the_draft_model_costs_time(tmp_path):
    a, dir_a = _run(tmp_path, "a", None, DRAFT)
    b, dir_b = _run(tmp_path, "b", None, DRAFT)
    for name in ("steps.csv", "requests.csv"):
        assert (dir_a / name).read_bytes() == (dir_b / name).read_bytes()
    assert a["spec_decode"] == b["spec_decode"]
    _, cols = read_csv(dir_a / "spec_decode.csv")  # the acceptance timeline adds up
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        assert sum(int(v) for v in cols[name]) == a["spec_decode"][name]
    assert a["spec_decode"]["drafter_s"] > 0
    ngram, _ = _run(tmp_path, "n", None, NGRAM)
    assert ngram["spec_decode"]["drafter_s"] < a["spec_decode"]["drafter_s"] / 100
    # An EAGLE-3 head (one layer of the target's shape) costs less than a 1B draft model
    # run for as many drafts, more than an n-gram lookup.
    eagle, _ = _run(tmp_path, "e", None, dict(EAGLE3, num_speculative_tokens=4))
    per_draft = {
        name: s["spec_decode"]["drafter_s"] / s["spec_decode"]["num_drafts"]
        for name, s in (("draft", a), ("eagle", eagle), ("ngram", ngram))
    }
    assert per_draft["ngram"] < per_draft["eagle"] < per_draft["draft"], per_draft


def test_a_decode_with_drafts_is_a_decode_in_the_step_records(tmp_path):
    _, run_dir = _run(tmp_path, "spec", False, NGRAM)
    _, cols = read_csv(run_dir / "steps.csv")
    prefill = [int(v) for v in cols["num_prefill_tokens"]]
    decode = [int(v) for v in cols["num_decode_tokens"]]
    running = [int(v) for v in cols["num_running"]]
    # A decode with drafts is no prefill: no step prefills fewer tokens than the
    # shortest prompt chunk (a verified draft counted as prefill would be 1 + s).
    assert all(p == 0 or p >= 64 for p in prefill), sorted(set(prefill))[:5]
    decode_only = [(d, r) for p, d, r in zip(prefill, decode, running) if p == 0 and d]
    assert len(decode_only) > len(prefill) / 2
    # Decode tokens scheduled include the drafts: more than one per running request.
    assert sum(d for d, _ in decode_only) > 1.5 * sum(r for _, r in decode_only)


OK_WORKLOAD = "arrival: {type: poisson, rate: 1}\nprompt_len: 10\noutput_len: 5\nnum_requests: 3\n"

BAD = [
    ("unknown-method", '{"method": "medusa", "num_speculative_tokens": 3}', ["method", "medusa"]),
    ("mtp", '{"method": "mtp", "num_speculative_tokens": 3}', ["mtp", "not modelled"]),
    ("k-negative", '{"method": "ngram", "num_speculative_tokens": -2}', ["num_speculative_tokens"]),
    (
        "k-beyond-model-len",
        '{"method": "ngram", "num_speculative_tokens": 5000}',
        ["num_speculative_tokens", "max_model_len"],
    ),
    (
        "unknown-draft-model",
        '{"method": "draft_model", "model": "Tiny-0.1B", "num_speculative_tokens": 3}',
        ["model", "Tiny-0.1B"],
    ),
    ("not-json", "{method: ngram}", ["not JSON"]),
]


def _cli(tmp_path, *args):
    (tmp_path / "ok.yaml").write_text(OK_WORKLOAD)
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", str(tmp_path / "ok.yaml"), *args, "--out", str(out)])
    assert not out.exists(), "a failed run left files behind"
    return res


@pytest.mark.parametrize(("case", "value", "needles"), BAD, ids=[c[0] for c in BAD])
def test_bad_speculative_config_exits_2_with_one_line(tmp_path, case, value, needles):
    res = _cli(tmp_path, "--max-model-len", "4096", "--speculative-config", value)
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert res.exit_code == 2, res.stderr
    assert "Traceback" not in res.stderr and len(lines) == 1, res.stderr
    assert lines[0].startswith("kvsim: error: --speculative-config")
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_offload_tier_with_spec_decode_exits_2(tmp_path):
    args = ["--no-async-scheduling", "--kv-offloading-size", "4"]
    res = _cli(tmp_path, *args, "--speculative-config", json.dumps(NGRAM))
    assert res.exit_code == 2, res.stderr
    assert "--kv-offloading-size" in res.stderr and len(res.stderr.splitlines()) == 1


def test_prefill_only_steps_skip_the_draft_model(tmp_path):
    """A step of partial prefill chunks only (2048-token prompts, 512 tokens a step)
    has no request that can use drafts: the scheduler says skip_drafts and the draft
    model's passes are not charged. The requests come one at a time, so each prompt
    has at least three such steps."""
    wl = write_yaml(
        tmp_path / "wl.yaml",
        {
            "arrival": {"type": "poisson", "rate": 0.5},
            "prompt_len": 2048,
            "output_len": 8,
            "num_requests": 6,
        },
    )
    engine = EngineConfig(
        max_model_len=4096,
        max_num_batched_tokens=512,
        max_num_seqs=16,
        async_scheduling=False,
        speculative_config=DRAFT,
    )
    summary = run(RunSpec(workload=str(wl), engine=engine, seed=1), tmp_path / "r", render=False)
    block = summary["spec_decode"]
    assert block["num_steps_drafter_skipped"] >= 3 * summary["num_finished"]
    assert block["drafter_s"] > 0


def test_the_run_table_names_the_method_and_its_acceptance(tmp_path):
    (tmp_path / "ok.yaml").write_text(OK_WORKLOAD)
    spec = '{"method": "eagle3", "num_speculative_tokens": 2, "acceptance_rate": 1.0}'
    res = CliRunner().invoke(
        app,
        ["run", str(tmp_path / "ok.yaml"), "--max-model-len", "4096", "--no-report"]
        + ["--speculative-config", spec, "--out", str(tmp_path / "run")],
    )
    assert res.exit_code == 0, res.output
    flat = " ".join(res.stdout.split())
    assert "speculative decoding" in flat and "eagle3, k = 2" in flat, flat
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # Every draft accepted: 3 tokens per draft.
    fact = spec_decode_fact(summary["spec_decode"])
    assert "100.0% of draft tokens accepted, 3.00 tokens per draft" in fact, fact
