"""Randomized differential conformance of speculative decoding: kvcore schedules,
verifies and rolls back drafts as vLLM 0.33.0 does.

Each test replays 100 random step traces with speculative decoding (methods ngram,
ngram_gpu and draft_model, 1-4 draft tokens; the fake drafter and verifier of
``kvcore/replay_spec.py`` on both sides) through vLLM's own scheduler (one
``.venv-vllm`` process; skipped when that environment is absent) and kvcore, once
with the synchronous engine loop and once with async scheduling (vLLM's default),
and requires every step line to match. ``test_spec_mutants_are_caught`` runs the
speculative mutants of ``mutation_demo.py`` (pure Python, in a subprocess) and
requires each to be caught with a readable diff.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from sim.conformance import DEFAULT_SEED
from sim.conformance.differential import DEFAULT_VLLM_PYTHON, run
from sim.conformance.generate import random_case
from sim.conformance.replay_kvcore import run_kvcore_steps

NUM_TRACES = 100
SEED = int(os.environ.get("KVSIM_CONFORMANCE_SEED", DEFAULT_SEED))
ROOT = Path(__file__).resolve().parents[2]
needs_vllm = pytest.mark.skipif(
    not DEFAULT_VLLM_PYTHON.exists(),
    reason="oracle environment .venv-vllm (vLLM 0.33.0) missing; "
    "create it with scripts/setup_vllm_oracle.sh",
)


def _coverage(async_scheduling: bool) -> Counter:
    """What kvcore's replays of the cases exercise (a run that matches vLLM
    exercises the same)."""
    seen: Counter = Counter()
    for i in range(NUM_TRACES):
        config, trace = random_case(SEED, i, async_scheduling, spec_decode=True)
        seen[config["speculative_method"]] += 1
        lines = run_kvcore_steps(config, trace)
        assert not isinstance(lines, str), lines
        for line in lines:
            if line.get("type") != "step":
                continue
            stats = line["spec_decoding"] or {}
            seen["accepted"] += stats.get("num_accepted_tokens", 0)
            seen["rejected"] += stats.get("num_draft_tokens", 0) - stats.get(
                "num_accepted_tokens", 0
            )
            seen["skip_drafts"] += bool(line["skip_drafts"])
            seen["preempted"] += len(line["preempted"])
            seen["padded"] += sum(
                1 for e in line["scheduled"] if e.get("spec") and e["kind"] != "running"
            )
    return seen


@needs_vllm
@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_spec_decode_matches_vllm(tmp_path: Path, async_scheduling: bool) -> None:
    report = run(
        NUM_TRACES,
        SEED,
        str(DEFAULT_VLLM_PYTHON),
        tmp_path / "failures",
        num_op_cases=0,
        num_sizing_cases=0,
        async_scheduling=async_scheduling,
        spec_decode=True,
    )
    details = "\n".join(m.render() for m in report.mismatches[:3])
    assert report.ok, (
        f"seed {SEED} (rerun with KVSIM_CONFORMANCE_SEED={SEED}): "
        f"{len(report.mismatches)} mismatching cases\n{details}"
    )
    assert report.vllm_version == "0.33.0" and report.traces == NUM_TRACES
    assert report.steps > 20 * report.traces
    seen = _coverage(async_scheduling)
    for key in ("ngram", "ngram_gpu", "draft_model", "accepted", "rejected"):
        assert seen[key] > 0, seen
    for key in ("skip_drafts", "preempted", "padded"):
        assert seen[key] > 0, seen


@needs_vllm
def test_spec_mutants_are_caught(tmp_path: Path) -> None:
    """Keeping a rejected draft as computed, or keeping drafts proposed after a
    prefill chunk, is caught; the diff names the step and the fields."""
    env = dict(os.environ, KVSIM_PURE_PYTHON="1")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests/conformance/mutation_demo.py"), "--spec-decode"]
        + ["--traces", "12", "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "== mutant accept-rejected" in out and "== mutant chunk-drafts" in out
    assert '"computed_after"' in out and '"spec"' in out, out[-3000:]
    assert "\n  vllm  : {" in out and "\n  kvcore: {" in out
