"""``kvsim run --decisions --no-async-scheduling`` with a constant step time equals
``kvsim replay`` (both the synchronous engine loop).

One random set of 40 requests (explicit token ids, some sharing 48- or 80-token
prefixes, bursts of arrivals and idle gaps) is written twice: as a kvsim JSONL trace
with ``arrival_s = arrival_step * 0.25`` for ``kvsim run``, and as a step-indexed
replay trace for ``kvsim replay``. Both run with the same knobs (block size 16, 48
GPU blocks so that requests are preempted, max_num_seqs 6, max_num_batched_tokens
96, max_model_len 400, chunked prefill and prefix caching on, FCFS).

Time mapping: 0.25 s is exact in binary, so every engine step starts at a multiple
of it; the engine adds requests due at a step boundary before that step's
``schedule()``, and starts at once when it was idle, exactly as the replay adds
requests with ``arrival_step <= step`` before step ``step``. The replay writes a line
for idle steps too (nothing scheduled); the engine does not step then. So the
replay's non-idle steps, in order, must equal ``decisions.jsonl`` line for line --
scheduled tokens per request, preempted, finished, free blocks -- and the engine's
step k must start at 0.25 x (the replay's step number). Exact equality.
"""

from __future__ import annotations

import json
import random

import pytest
from sim_run_helpers import column, kvsim_cli, read_csv, write_jsonl

STEP_S = 0.25
KNOBS = {"block_size": 16, "max_num_seqs": 6, "max_num_batched_tokens": 96, "max_model_len": 400}
NUM_BLOCKS = 48


def _requests(seed: int = 1234) -> list[dict]:
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1, 30000) for _ in range(n)] for n in (48, 80)]
    out, step = [], 0
    for i in range(40):
        step += rng.choice([0, 0, 0, 1, 2, 3]) if i % 13 else 40  # bursts and idle gaps
        own = [rng.randrange(1, 30000) for _ in range(rng.randint(5, 200))]
        choice = rng.random()
        prompt = (
            (prefixes[0] + own) if choice < 0.3 else (prefixes[1] + own) if choice < 0.5 else own
        )
        out.append(
            {
                "id": f"r{i:02d}",
                "step": step,
                "prompt": prompt[:300],
                "max_tokens": rng.randint(1, 60),
            }
        )
    return out


@pytest.fixture(scope="module")
def both_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("decisions")
    reqs = _requests()
    trace = write_jsonl(
        tmp / "trace.jsonl",
        [
            {
                "request_id": r["id"],
                "arrival_s": r["step"] * STEP_S,
                "prompt_token_ids": r["prompt"],
                "output_tokens": r["max_tokens"],
            }
            for r in reqs
        ],
    )
    replay_trace = tmp / "replay.json"
    replay_trace.write_text(
        json.dumps(
            [
                {
                    "request_id": r["id"],
                    "arrival_step": r["step"],
                    "prompt_token_ids": r["prompt"],
                    "max_tokens": r["max_tokens"],
                }
                for r in reqs
            ]
        )
    )
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in KNOBS.items()]
    common = [
        *flags,
        "--scheduling-policy",
        "fcfs",
        "--enable-chunked-prefill",
        "--enable-prefix-caching",
    ]
    sim = kvsim_cli(
        "run",
        str(trace),
        "--out",
        str(tmp / "run"),
        "--decisions",
        "--no-async-scheduling",  # the synchronous loop (kvsim replay's default)
        "--latency-model",
        "constant",
        "--constant-step-s",
        str(STEP_S),
        f"--num-gpu-blocks-override={NUM_BLOCKS}",
        *common,
    )
    assert sim.returncode == 0, sim.stderr
    rep = kvsim_cli(
        "replay",
        str(replay_trace),
        "--out",
        str(tmp / "replay.jsonl"),
        f"--num-gpu-blocks={NUM_BLOCKS}",
        *common,
    )
    assert rep.returncode == 0, rep.stderr
    decisions = [json.loads(x) for x in (tmp / "run" / "decisions.jsonl").read_text().splitlines()]
    lines = [json.loads(x) for x in (tmp / "replay.jsonl").read_text().splitlines()]
    return tmp, decisions, [x for x in lines if x["type"] == "step"]


def test_trace_exercises_preemption_and_idle_steps(both_runs):
    """Guard: the case has preemptions, prefix hits and idle replay steps."""
    _, _, steps = both_runs
    assert sum(len(s["preempted"]) for s in steps) > 0
    assert sum(s["prefix_cache"]["hits"] for s in steps) > 0
    assert any(s["total_scheduled_tokens"] == 0 for s in steps)


def test_decisions_equal_replay_steps(both_runs):
    """Each decisions.jsonl line equals the matching non-idle replay step (exact)."""
    _, decisions, steps = both_runs
    busy = [s for s in steps if s["total_scheduled_tokens"] > 0]
    for s in steps:
        if s["total_scheduled_tokens"] == 0:
            assert not s["preempted"] and not s["finished"], s
    assert len(decisions) == len(busy)
    for k, (d, s) in enumerate(zip(decisions, busy)):
        assert d["replica"] == 0 and d["step"] == k
        want = {
            "scheduled": {e["id"]: e["n"] for e in s["scheduled"]},
            "preempted": s["preempted"],
            "finished": s["finished"],
            "num_free_blocks": s["free_blocks"],
        }
        got = {key: d[key] for key in want}
        assert got == want, f"engine step {k} vs replay step {s['step']}"


def test_engine_steps_start_at_replay_step_times(both_runs):
    """steps.csv start_s of engine step k = 0.25 x the k-th non-idle replay step (1e-9)."""
    tmp, _, steps = both_runs
    busy = [s["step"] for s in steps if s["total_scheduled_tokens"] > 0]
    _, cols = read_csv(tmp / "run" / "steps.csv")
    start = column(cols, "start_s")
    assert len(start) == len(busy)
    assert max(abs(a - STEP_S * b) for a, b in zip(start, busy)) < 1e-9
