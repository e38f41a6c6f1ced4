"""Preemptions appear when KV blocks are scarce and vanish when they are ample.

60 requests of 200 prompt + 150..250 output tokens arrive at once (a burst). Each
needs up to 29 blocks of 16 tokens at its end; 64 blocks hold two at full length,
while the scheduler admits many more (it only needs blocks for the prompt), so decode
growth must preempt. 4,000 blocks hold all 60 at once: no preemption. The counts
must agree exactly across ``summary.json``, ``requests.csv`` and ``steps.csv``.
"""

from __future__ import annotations

import json

import pytest
from sim_run_helpers import column, read_csv, run_sim, write_yaml


@pytest.fixture(scope="module")
def burst(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("preempt")
    return tmp, write_yaml(
        tmp / "burst.yaml",
        {
            "name": "burst",
            "seed": 2,
            "arrival": {"type": "burst"},
            "prompt_len": 200,
            "output_len": {"type": "uniform", "min": 150, "max": 250},
            "num_requests": 60,
        },
    )


def _counts(out):
    summary = json.loads((out / "summary.json").read_text())
    _, reqs = read_csv(out / "requests.csv")
    _, steps = read_csv(out / "steps.csv")
    per_request = int(column(reqs, "num_preemptions").sum())
    per_step = int(column(steps, "num_preempted").sum())
    return summary, per_request, per_step


@pytest.mark.parametrize(
    ("blocks", "expect_preemptions"), [(64, True), (4000, False)], ids=["scarce-64", "ample-4000"]
)
def test_preemptions_follow_block_scarcity(burst, blocks, expect_preemptions):
    """Scarce: > 0 preemptions, every request still finishes; ample: exactly 0."""
    tmp, workload = burst
    out = tmp / f"out{blocks}"
    run_sim(
        workload,
        out,
        latency_model="constant",
        constant_step_s=2**-7,
        num_gpu_blocks_override=blocks,
        max_model_len=512,
        max_num_seqs=64,
        max_num_batched_tokens=2048,
    )
    summary, per_request, per_step = _counts(out)
    assert summary["num_finished"] == 60
    assert summary["num_gpu_blocks"] == blocks
    assert summary["num_preemptions"] == per_request == per_step
    assert summary["preemptions_per_request"] == pytest.approx(per_request / 60)
    if expect_preemptions:
        assert per_request > 0
        assert summary["kv_usage"]["max"] > 0.9
    else:
        assert per_request == 0
