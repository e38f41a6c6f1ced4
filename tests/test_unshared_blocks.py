"""Unshared requests' blocks kept out of the prefix cache's hash map until a preemption
(``Request.unshared``, ``BlockPool.cache_full_blocks(unlisted=...)``, ``list_blocks``):
the same counts, evictions and hits as vLLM's eager registration, in the pool and in
whole runs with preemptions."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest

import workloads.sessions
import workloads.synthetic
import workloads.trace_workload
from kvcore.block_hashing import FastBlockHasher
from kvcore.request import Request, RequestStatus
from tests.kv_cache_helpers import kv_manager
from tests.sim_run_helpers import run_sim, write_jsonl, write_yaml
from workloads.request import SimRequest
from workloads.trace_rows import TraceRows


def _request(rid: str, tokens: list[int], unshared: bool) -> Request:
    return Request(rid, tokens, 16, block_hasher=FastBlockHasher(16), unshared=unshared)


TOKENS = list(range(100, 148))  # three full blocks


def test_unshared_blocks_are_cached_but_no_lookup_finds_them() -> None:
    kvm = kv_manager()
    a = _request("a", TOKENS, unshared=True)
    assert kvm.allocate_slots(a, 48) is not None
    pool = kvm.block_pool
    assert pool.num_cached_blocks == 3
    pool.check_invariants()
    twin = _request("twin", TOKENS, unshared=False)  # the same prompt: only a test has one
    assert kvm.get_computed_blocks(twin)[1] == 0


@pytest.mark.parametrize("unshared", [False, True])
def test_a_preempted_request_hits_its_own_blocks(unshared: bool) -> None:
    kvm = kv_manager()
    a = _request("a", TOKENS, unshared)
    kvm.allocate_slots(a, 48)
    a.num_computed_tokens = 48
    a.status = RequestStatus.RUNNING
    kvm.free(a)  # preempted: freed while running
    a.num_computed_tokens = 0
    blocks, hit = kvm.get_computed_blocks(a)
    assert hit == 32  # two blocks: the last token is never a hit
    kvm.block_pool.check_invariants()


def test_a_finished_request_leaves_them_unlisted_and_eviction_counts_them() -> None:
    counts = {}
    for unshared in (False, True):
        kvm = kv_manager(num_blocks=8)
        pool = kvm.block_pool
        a = _request("a", TOKENS, unshared)
        kvm.allocate_slots(a, 48)
        a.status = RequestStatus.FINISHED_LENGTH_CAPPED
        kvm.free(a)
        seen = [(pool.num_cached_blocks, pool.num_cached_free_blocks)]
        b = _request("b", list(range(500, 596)), unshared)  # six blocks: evicts a's three
        kvm.allocate_slots(b, 96)
        seen.append((pool.num_cached_blocks, pool.num_cached_free_blocks))
        seen.append(tuple(blk.block_id for blk in kvm.get_blocks("b").blocks[0]))
        pool.check_invariants()
        counts[unshared] = seen
    assert counts[True] == counts[False]
    assert counts[True][0] == (3, 3)


def test_sliding_window_groups_and_kv_events_register_at_once() -> None:
    hybrid = kv_manager(groups=("full", "sliding"))
    a = _request("a", TOKENS, unshared=True)
    hybrid.allocate_slots(a, 48)
    sliding_hashes = [b._hash for b in hybrid.get_blocks("a").blocks[1] if b._hash is not None]
    assert sliding_hashes
    assert all(hybrid.block_pool.get_cached_block(h, [1]) for h in sliding_hashes)
    assert hybrid.block_pool.get_cached_block(a.block_hashes[0], [0]) is None
    with_events = kv_manager(enable_kv_cache_events=True)
    b = _request("b", TOKENS, unshared=True)
    with_events.allocate_slots(b, 48)
    assert with_events.block_pool.get_cached_block(b.block_hashes[0], [0]) is not None


def _trace(path: Path, n: int) -> Path:
    """A length-only trace (ids drawn per row: unshared), arrivals bursty enough that a
    small KV cache preempts."""
    rng = random.Random(7)
    t = 0.0
    rows = []
    for i in range(n):
        t += rng.expovariate(40.0)
        rows.append(
            {
                "request_id": f"q{i}",
                "arrival_s": round(t, 6),
                "prompt_tokens": rng.randint(20, 700),
                "output_tokens": rng.randint(1, 300),
            }
        )
    return write_jsonl(path, rows)


def _eager(cls: type) -> Callable[..., object]:
    """``cls`` (what makes the workload's requests) with ``unshared`` forced off."""

    def make(*args: object, **kwargs: object) -> object:
        return cls(*args, **{**kwargs, "unshared": False})

    return make


def _run(workload: Path, out: Path, unlisted: bool, monkeypatch, **knobs) -> dict:
    with monkeypatch.context() as m:
        if not unlisted:  # every request registered at once, as vLLM does
            m.setattr(workloads.trace_workload, "TraceRows", _eager(TraceRows))
            m.setattr(workloads.sessions, "SimRequest", _eager(SimRequest))
            m.setattr(workloads.synthetic, "SimRequest", _eager(SimRequest))
        return run_sim(
            workload,
            out,
            decisions=True,
            model="Llama-3.1-8B",
            gpu="A100-80GB",
            render=False,
            num_gpu_blocks_override=260,
            max_model_len=2048,
            **knobs,
        )


@pytest.mark.parametrize(
    "knobs",
    [
        {},
        {"async_scheduling": False},
        {"fast_forward": False, "check": True},
        {"async_scheduling": False, "fast_forward": False, "check": True},
    ],
)
@pytest.mark.parametrize("kind", ["trace", "synthetic"])
def test_runs_with_preemptions_are_byte_identical(tmp_path: Path, monkeypatch, knobs, kind) -> None:
    if kind == "trace":
        workload = _trace(tmp_path / "t.jsonl", 400)
    else:  # one-turn sessions, a quarter of them after a shared prefix (listed at once)
        workload = write_yaml(
            tmp_path / "w.yaml",
            {
                "name": "w",
                "seed": 3,
                "arrival": {"type": "poisson", "rate": 40.0},
                "prompt_len": {"type": "lognormal", "median": 200, "p90": 700, "max": 1500},
                "output_len": {"type": "lognormal", "median": 100, "p90": 300, "max": 500},
                "shared_prefix": {"num_groups": 2, "prefix_len": 100, "fraction": 0.25},
                "num_requests": 400,
            },
        )
    eager = _run(workload, tmp_path / "eager", False, monkeypatch, **knobs)
    _run(workload, tmp_path / "lazy", True, monkeypatch, **knobs)
    assert eager["num_preemptions"] > 0 and eager["prefix_cache_hit_rate"] > 0
    for name in ("steps.csv", "requests.csv", "decisions.jsonl"):
        assert (tmp_path / "lazy" / name).read_bytes() == (tmp_path / "eager" / name).read_bytes()
    summaries = [
        json.loads((tmp_path / side / "summary.json").read_text()) for side in ("lazy", "eager")
    ]
    for summary in summaries:
        summary.pop("wall_s")
    assert summaries[0] == summaries[1]
