"""Low load with a constant step time: no request queues, TTFT is the prefill steps.

Requests arrive 4 s apart and each finishes in well under 4 s (at most
ceil(2000 / 256) + 7 = 15 steps of 0.125 s), so the engine is idle at every arrival
and starts a step at the arrival instant itself. Then, exactly (all times are
multiples of 0.125 s, exact in binary; tolerance 1e-9 s for the 9-digit CSV):

- every step has ``num_waiting == 0`` and at most one running request;
- TTFT = ceil(prompt / max_num_batched_tokens) * step_s with chunked prefill (the
  first token is sampled at the end of the last prefill chunk), one step without;
- E2E = (prefill steps + output_tokens - 1) * step_s (one decode step per token).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from sim_run_helpers import column, read_csv, run_sim, write_yaml

STEP_S = 0.125
GAP_S = 4.0


@pytest.mark.parametrize("async_scheduling", [True, False], ids=["async", "sync"])
@pytest.mark.parametrize(
    ("chunked", "max_num_batched_tokens"), [(True, 256), (False, 4096)], ids=["chunked", "whole"]
)
def test_low_load_no_queue_and_ttft_is_prefill_steps(
    tmp_path, chunked, max_num_batched_tokens, async_scheduling
):
    """No request ever waits; each TTFT and E2E equal its step count x step time (1e-9 s).

    The same in both engine loops: at an idle engine the async loop schedules the next
    step (a prefill chunk, or a decode with the placeholder of the token in flight) the
    moment it launches one, so the GPU runs the request's steps back to back, and each
    step's output is applied at its end, as in the synchronous loop."""
    workload = write_yaml(
        tmp_path / "low.yaml",
        {
            "name": "low-load",
            "seed": 5,
            "arrival": {"type": "constant", "rate": 1.0 / GAP_S},
            "prompt_len": {"type": "uniform", "min": 1, "max": 2000},
            "output_len": {"type": "uniform", "min": 1, "max": 8},
            "num_requests": 24,
        },
    )
    summary = run_sim(
        workload,
        tmp_path / "out",
        latency_model="constant",
        constant_step_s=STEP_S,
        enable_chunked_prefill=chunked,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=64,
        max_model_len=4096,
        enable_prefix_caching=False,
        async_scheduling=async_scheduling,
    )
    assert summary["num_finished"] == 24

    _, steps = read_csv(tmp_path / "out" / "steps.csv")
    assert column(steps, "num_waiting").max() == 0, "a request waited at low load"
    assert column(steps, "num_running").max() <= 1
    np.testing.assert_allclose(column(steps, "duration_s"), STEP_S, rtol=0, atol=1e-12)

    _, reqs = read_csv(tmp_path / "out" / "requests.csv")
    arrival = column(reqs, "arrival_s")
    prompt = column(reqs, "prompt_tokens").astype(int)
    output = column(reqs, "output_tokens").astype(int)
    assert len(set(prompt.tolist())) > 10, "the test needs varied prompt lengths"
    assert (prompt > max_num_batched_tokens).any() or not chunked
    np.testing.assert_allclose(arrival, GAP_S * np.arange(24), rtol=0, atol=1e-9)

    prefill_steps = np.array([math.ceil(p / max_num_batched_tokens) for p in prompt])
    ttft = column(reqs, "first_token_s") - arrival
    e2e = column(reqs, "finish_s") - arrival
    np.testing.assert_allclose(ttft, prefill_steps * STEP_S, rtol=0, atol=1e-9)
    np.testing.assert_allclose(e2e, (prefill_steps + output - 1) * STEP_S, rtol=0, atol=1e-9)
    assert column(reqs, "num_preemptions").sum() == 0
    # The engine stepped exactly as often as the requests needed.
    assert summary["num_steps"] == int((prefill_steps + output - 1).sum())


@pytest.mark.parametrize("async_scheduling", [True, False], ids=["async", "sync"])
def test_a_request_arriving_mid_step_waits_one_step_longer_with_async(tmp_path, async_scheduling):
    """A request B that arrives while the engine decodes another request A.

    Constant steps of ``s``; A arrives at 0 with a long output, so the GPU runs one step
    after another, step k in ``[k s, (k + 1) s]``. B arrives at ``10.5 s``, in step 10.

    - Synchronous loop: B is added when step 10 ends (11 s) and prefilled in step 11;
      its first token is applied at 12 s: TTFT = 1.5 s.
    - Async scheduling (batch queue of 2): step k + 1 is scheduled when step k is
      launched, i.e. when step k - 1's output is applied at ``k s``. At 11 s the engine
      applies step 10 and schedules step 12 (step 11 was scheduled at 10 s, before B
      came); B is prefilled in step 12 and its token applied at 13 s: TTFT = 2.5 s,
      exactly one step more.

    A itself decodes one token per step in both loops: E2E = its output tokens x s.
    """
    step = 0.01
    rows = [
        {
            "request_id": "A",
            "arrival_s": 0.0,
            "prompt_token_ids": list(range(1, 33)),
            "output_tokens": 40,
        },
        {
            "request_id": "B",
            "arrival_s": 10.5 * step,
            "prompt_token_ids": list(range(100, 132)),
            "output_tokens": 5,
        },
    ]
    trace = tmp_path / "two.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_sim(
        trace,
        tmp_path / "out",
        latency_model="constant",
        constant_step_s=step,
        max_num_seqs=8,
        max_model_len=4096,
        enable_prefix_caching=False,
        async_scheduling=async_scheduling,
    )
    _, reqs = read_csv(tmp_path / "out" / "requests.csv")
    ttft = dict(zip(reqs["request_id"], column(reqs, "first_token_s") - column(reqs, "arrival_s")))
    e2e = dict(zip(reqs["request_id"], column(reqs, "finish_s") - column(reqs, "arrival_s")))
    sync_ttft = 1.5 * step
    expected = sync_ttft + step if async_scheduling else sync_ttft
    assert ttft["B"] == pytest.approx(expected, abs=1e-9)
    assert ttft["A"] == pytest.approx(step, abs=1e-9)
    assert e2e["A"] == pytest.approx(40 * step, abs=1e-9)
