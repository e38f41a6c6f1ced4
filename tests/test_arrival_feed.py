"""Arrivals taken ahead: a trace replayed by one replica in the async loop, whose
stretches admit the trace's upcoming requests where the loop would
(:mod:`sim.engine.stretch_feed`, :mod:`workloads.feed`), writes what stepping writes.

The traces vary what can stop a stretch from taking a request: bursts (requests at one
instant), prompts over the token budget, prompts the engine rejects, shared prefixes
(hits, or first blocks another request shares), prompts shorter than a block, LoRA
adapters, a small KV pool (preemptions), and the trace's last request.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import simpy

from kvcore.block_hashing import BlockHasher
from kvcore.join_foresight import JoinForesight
from kvcore.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from kvcore.request import Request
from kvcore.scheduler import Scheduler
from kvcore.scheduler_config import SchedulerConfig
from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec, simulate
from sim.app.setup import resolve_run
from sim.engine.replica import ReplicaEngine
from sim.engine.stretch_feed import FeedStretchRunner
from workloads.feed import ArrivalFeed
from workloads.request import SimRequest

FILES = ("requests.csv", "steps.csv", "decisions.jsonl")


def _trace(case: int, n: int) -> list[dict[str, Any]]:
    """Trace ``case``'s ``n`` lines (see the module docstring)."""
    rng = random.Random(case)
    rate = (4.0, 12.0, 30.0, 8.0)[case % 4]
    t = 0.0
    lines = []
    for i in range(n):
        if rng.random() > 0.1:  # every tenth comes with the one before it
            t += rng.expovariate(rate)
        line: dict[str, Any] = {
            "request_id": f"q{i}",
            "arrival_s": round(t, 6),
            "output_tokens": rng.choice((1, 2, 5, 40, 128, 300)),
        }
        kind = rng.random()
        if case % 2 and kind < 0.3:  # shared prefixes: blocks of 512 tokens
            line["prompt_tokens"] = 1000
            line["hash_ids"] = [rng.randrange(3), rng.randrange(1000)]
            line["hash_block_size"] = 512
        elif kind < 0.36:
            line["prompt_token_ids"] = [rng.randrange(100, 900) for _ in range(rng.randint(1, 20))]
        elif kind < 0.38:
            line["prompt_tokens"] = rng.choice((3000, 5000))  # over max_model_len: rejected
        elif kind < 0.41:
            line["prompt_tokens"] = 2100  # over the token budget: chunked
        else:
            line["prompt_tokens"] = rng.randint(16, 900)
        if kind > 0.97:
            line["lora_id"] = 1
        lines.append(line)
    return lines


ENGINES: list[dict[str, Any]] = [
    {"max_model_len": 2500, "max_num_batched_tokens": 2048},
    {"max_model_len": 2500, "max_num_batched_tokens": 2048, "num_gpu_blocks_override": 400},
    {"max_model_len": 2500, "enable_prefix_caching": False},
    {"max_model_len": 2500, "max_num_seqs": 8},
]


def _run(tmp_path: Path, case: int, ff: bool) -> tuple[dict[str, Any], list[ReplicaEngine]]:
    trace = tmp_path / "trace.jsonl"
    if not trace.exists():
        trace.write_text("".join(json.dumps(line) + "\n" for line in _trace(case, 160)))
    eng = EngineConfig(async_scheduling=True, **ENGINES[case % len(ENGINES)])
    spec = RunSpec(workload=str(trace), model="Llama-3.1-8B", engine=eng)
    out = tmp_path / f"ff-{ff}"
    out.mkdir()
    engines: list[ReplicaEngine] = []
    summary = simulate(
        resolve_run(spec),
        out,
        decisions=True,
        fast_forward=ff,
        on_cluster=lambda c: engines.extend(c.engines),
    )
    summary.pop("wall_s")
    return summary, engines


@pytest.mark.parametrize("case", range(8))
def test_fed_stretches_write_what_stepping_writes(case: int, tmp_path: Path) -> None:
    """Fast-forward with the feed against stepping: the same records and summary, and
    the feed took requests (most of them where nothing stops it)."""
    on, engines = _run(tmp_path, case, True)
    off, _ = _run(tmp_path, case, False)
    assert on == off
    for name in FILES:
        a = (tmp_path / "ff-True" / name).read_bytes()
        b = (tmp_path / "ff-False" / name).read_bytes()
        assert a == b, f"{name} differs (case {case})"
    runner = engines[0].stretches
    assert isinstance(runner, FeedStretchRunner) and runner.feed is not None
    assert runner.num_fed > {0: 30, 1: 5, 2: 100, 3: 30}[case % 4]


def test_feed_times_and_skips() -> None:
    """The feed's arrival times are those ``env.timeout`` lands at from the previous
    one; its process submits, each at its time, only the requests not taken, never
    the last one taken."""
    times = [0.3, 0.3, 1e-9 + 0.7, 0.2, 5.1, 5.1000001, 9.0]
    env = simpy.Environment()

    def build(i: int, t: float) -> SimRequest:
        return SimRequest(f"r{i}", t, [1, 2, 3, 4], 1)

    counted: list[int] = []
    feed = ArrivalFeed(times, len(times), build, lambda t: env.timeout(t - env.now), counted.append)
    submitted: list[tuple[str, float, float]] = []
    env.process(
        feed.replay(env, lambda sr: submitted.append((sr.request_id, sr.arrival_s, env.now)))
    )
    expected, t = [], 0.0
    for when in times:
        t = t + (when - t) if when > t else t
        expected.append(t)
    upcoming = [feed.upcoming(i) for i in range(len(times))]
    assert [sr.arrival_s for sr in upcoming if sr] == expected
    assert feed.upcoming(len(times)) is None
    env.run(until=0.5)  # r0, r1 submitted
    assert [s[0] for s in submitted] == ["r0", "r1"]
    taken = feed.take(3)  # r2 .. r4, before their times
    assert [sr.request_id for sr in taken] == ["r2", "r3", "r4"] and counted == [3]
    with pytest.raises(AssertionError):
        feed.take(feed.num_left)  # the last one is the process's
    env.run()
    assert [s[0] for s in submitted] == ["r0", "r1", "r5", "r6"]
    assert all(arrival == now for _, arrival, now in submitted)
    assert [s[1] for s in submitted] == [expected[i] for i in (0, 1, 5, 6)]


def _scheduler(caching: bool = True) -> Scheduler:
    config = KVCacheConfig(200, [], [KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=16))])
    return Scheduler(
        SchedulerConfig(max_model_len=4096, max_num_batched_tokens=4096, max_num_seqs=64),
        config,
        enable_caching=caching,
    )


def _req(rid: str, tokens: list[int]) -> Request:
    return Request(rid, tokens, 4, block_hasher=BlockHasher.from_name(16))


def test_foresight_refuses_what_could_change() -> None:
    """A join's prefill is its prompt when it hits nothing and no request of the
    stretch shares its first block; else nothing is foreseen from it on."""
    sched = _scheduler()
    running = _req("a", list(range(40)))
    sched.add_request(running)
    sched.schedule()  # a runs, its first two blocks registered
    first = _req("b", list(range(100, 140)))
    fs = JoinForesight(sched, [first])
    assert fs.prefill(_req("c", list(range(200, 240)))) == 40
    assert fs.prefill(_req("d", list(range(100, 120)) + [1] * 20)) is None  # b's first
    assert fs.prefill(_req("e", list(range(300, 340)))) is None  # after a refusal
    fs = JoinForesight(sched, [])
    assert fs.prefill(_req("f", list(range(40)))) is None  # hits a's blocks
    fs = JoinForesight(sched, [_req("g", [5] * 10)])  # no full block: anything may come
    assert fs.prefill(_req("h", list(range(500, 540)))) is None
    fs = JoinForesight(_scheduler(caching=False), [])
    assert fs.prefill(_req("i", list(range(40)))) == 40


def _against_stepping(
    tmp_path: Path, wl: dict[str, Any]
) -> tuple[dict[bool, list[bytes]], list[ReplicaEngine]]:
    """Run workload ``wl`` (async loop) with fast-forward and without: each run's
    records, and the fast-forwarded run's engines."""
    path = tmp_path / "wl.yaml"
    path.write_text(json.dumps(wl))
    files = {}
    engines: list[ReplicaEngine] = []
    for ff in (True, False):
        spec = RunSpec(workload=str(path), engine=EngineConfig(async_scheduling=True))
        out = tmp_path / f"ff-{ff}"
        out.mkdir()
        seen: list[ReplicaEngine] = []
        simulate(
            resolve_run(spec), out, decisions=True, fast_forward=ff,
            on_cluster=lambda c, e=seen: e.extend(c.engines),
        )  # fmt: skip
        files[ff] = [(out / name).read_bytes() for name in FILES]
        if ff:
            engines = seen
    return files, engines


def test_one_token_prompts_are_stepped(tmp_path: Path) -> None:
    """A synthetic workload (no feed: its arrivals join a stretch's first iteration)
    with one-token prompts, which the step cost counts as decodes: the records are
    stepping's."""
    wl = {
        "name": "short",
        "seed": 5,
        "num_requests": 150,
        "arrival": {"type": "poisson", "rate": 25.0},
        "prompt_len": {"type": "uniform", "min": 1, "max": 3},
        "output_len": 60,
    }
    files, _ = _against_stepping(tmp_path, wl)
    assert files[True] == files[False]


@pytest.mark.parametrize(
    ("extra", "fed"),
    [({}, True), ({"num_requests": None, "duration_s": 10.0}, False), ({"timeout_s": 30.0}, False)],
    ids=["count", "duration", "timeouts"],
)
def test_synthetic_open_loop_feed(extra: dict[str, Any], fed: bool, tmp_path: Path) -> None:
    """A synthetic open loop of single requests bounded by a count is fed (the records
    are stepping's); one bounded by a duration, or whose clients time out, is not."""
    wl: dict[str, Any] = {
        "name": "open",
        "seed": 2,
        "num_requests": 120,
        "arrival": {"type": "poisson", "rate": 12.0},
        "prompt_len": {"type": "uniform", "min": 20, "max": 700},
        "output_len": {"type": "uniform", "min": 1, "max": 200},
        **extra,
    }
    wl = {k: v for k, v in wl.items() if v is not None}
    files, engines = _against_stepping(tmp_path, wl)
    runner = engines[0].stretches
    feeds = isinstance(runner, FeedStretchRunner) and runner.feed is not None
    assert feeds == fed
    assert not fed or runner.num_fed > 60
    assert files[True] == files[False]
