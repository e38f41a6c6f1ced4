"""Differential conformance of the CPU KV offload tier against vLLM 0.33.0 itself.

vLLM's real ``Scheduler`` is built on a CPU with the KV offloading configured the way
``--kv-offloading-size`` does it (``CacheConfig.kv_offloading_size`` ->
``OffloadingConnector``, ``kv_role="kv_both"``, CPU backend with LRU), so its
``OffloadingConnectorScheduler`` and ``CPUOffloadingManager`` run unmodified in the
scheduler role. Only the worker role is replaced, on both sides by the same
``sim.conformance.offload_worker.FakeOffloadWorker`` (jobs finish a fixed number of
steps after they are issued; flushed jobs at once). kvcore replays each case with
its ``Scheduler`` and ``OffloadingConnectorScheduler``; every step line must be
equal (see :mod:`sim.conformance.offload` for the fields: scheduled tokens, block
counts, requests waiting for KV, each load and store job with its keys, GPU blocks
and CPU chunks, flushes, completions, the CPU tier's contents, prefix-cache
counters). One deviation is fixed on the vLLM side: vLLM visits the finished
requests of a step in the iteration order of a set of strings (string hashing, so it
changes from process to process); the driver makes that set iterate sorted, the
order kvcore uses. Capacity cases compare kvcore's chunk count with vLLM's
``CPUOffloadingSpec``. The same cases also run with async scheduling (vLLM's default
engine loop), one line per iteration of the engine core's batch queue.

Skipped when the oracle environment (.venv-vllm) is absent.
"""

from __future__ import annotations

import os

import pytest

from kvcore.cpu_offload_manager import LRUCachePolicy
from kvcore.offloading_connector import OffloadingConnectorScheduler
from kvcore.scheduler import Scheduler
from sim.conformance.differential import DEFAULT_VLLM_PYTHON
from sim.conformance.offload import (
    compare,
    random_case,
    run_capacity_kvcore,
    run_kvcore_or_error,
    run_oracle,
)

NUM_CASES = 100
MUTANT_CASES = 20
ASYNC_CASES = 60
SEED = int(os.environ.get("KVSIM_CONFORMANCE_SEED", 0))
needs_vllm = pytest.mark.skipif(
    not DEFAULT_VLLM_PYTHON.exists(),
    reason="oracle environment .venv-vllm (vLLM 0.33.0) missing; "
    "create it with scripts/setup_vllm_oracle.sh",
)


def _coverage(lines_per_case: list[list[dict]]) -> dict[str, int]:
    counts = dict.fromkeys(
        ("loads", "cpu_evictions", "waits", "preemptions", "flushes", "abort_while_loading"), 0
    )
    for lines in lines_per_case:
        held: set[str] = set()
        loading: set[str] = set()
        for x in lines:
            if x["type"] != "step":
                continue
            counts["loads"] += len(x["loads"])
            counts["waits"] += bool(x["waiting_for_kv"])
            counts["preemptions"] += len(x["preempted"])
            counts["flushes"] += len(x["flush"])
            counts["abort_while_loading"] += len(set(x["aborted"]) & loading)
            keys = set(x["cpu"]["keys"])
            counts["cpu_evictions"] += len(held - keys)
            held, loading = keys, set(x["waiting_for_kv"])
    return counts


@pytest.fixture(scope="module")
def oracle() -> tuple[list, list, object]:
    """The cases, vLLM's step lines for each and its capacity answers: one oracle run
    for every test of the module (the mutants replay the first ``MUTANT_CASES``)."""
    if not DEFAULT_VLLM_PYTHON.exists():
        pytest.skip("oracle environment .venv-vllm (vLLM 0.33.0) missing")
    cases = [random_case(SEED, i) for i in range(NUM_CASES)]
    vllm_lines, capacity = run_oracle(str(DEFAULT_VLLM_PYTHON), cases, timeout=1200)
    return cases, vllm_lines, capacity


@needs_vllm
def test_offload_matches_vllm(oracle: tuple[list, list, object]) -> None:
    cases, vllm_lines, capacity = oracle
    assert capacity == run_capacity_kvcore()
    assert vllm_lines[0][0]["vllm_version"] == "0.33.0"
    ours = [run_kvcore_or_error(c, t) for c, t in cases]
    diffs = [(i, compare(v, k)) for i, (v, k) in enumerate(zip(vllm_lines, ours))]
    bad = [(i, d) for i, d in diffs if d is not None]
    assert not bad, f"seed {SEED}: {len(bad)} of {NUM_CASES} cases differ\n" + "\n".join(
        f"case {i} {cases[i][0]}: {d.render()}" for i, d in bad[:3]
    )
    counts = _coverage(ours)
    assert all(n > 0 for n in counts.values()), counts
    assert any(c["blocks_per_chunk"] > 1 for c, _ in cases)
    assert any(len(c["kv_groups"]) > 1 for c, _ in cases)
    assert sum(len(x) for x in ours) > 40 * NUM_CASES


@pytest.fixture(scope="module")
def oracle_async() -> tuple[list, list]:
    """The same random cases with async scheduling: vLLM's ``AsyncScheduler`` behind
    the engine core's batch queue (``EngineCore.step_with_batch_queue``) on the vLLM
    side, kvcore's ``AsyncScheduler`` behind ``BatchQueue`` on the other."""
    if not DEFAULT_VLLM_PYTHON.exists():
        pytest.skip("oracle environment .venv-vllm (vLLM 0.33.0) missing")
    cases = []
    for i in range(ASYNC_CASES):
        config, trace = random_case(SEED, i)
        cases.append((dict(config, async_scheduling=True), trace))
    vllm_lines, _ = run_oracle(str(DEFAULT_VLLM_PYTHON), cases, timeout=1200)
    return cases, vllm_lines


@needs_vllm
def test_offload_matches_vllm_with_async_scheduling(oracle_async: tuple[list, list]) -> None:
    """One line per engine iteration: the batch it scheduled (its jobs, flushes and
    the fake worker's report), the batch whose output it applied, the batches in
    flight, the CPU tier and the counters; kvcore's must equal vLLM's."""
    cases, vllm_lines = oracle_async
    ours = [run_kvcore_or_error(c, t) for c, t in cases]
    diffs = [(i, compare(v, k)) for i, (v, k) in enumerate(zip(vllm_lines, ours))]
    bad = [(i, d) for i, d in diffs if d is not None]
    assert not bad, f"seed {SEED}: {len(bad)} of {ASYNC_CASES} async cases differ\n" + "\n".join(
        f"case {i} {cases[i][0]}: {d.render()}" for i, d in bad[:3]
    )
    steps = [x for lines in ours for x in lines if x["type"] == "step"]
    assert any(len(x["in_flight"]) == 1 and x["applied_step"] is not None for x in steps)
    batches = [x for x in steps if x["scheduled"] is not None]
    assert sum(len(x["loads"]) for x in batches) > 0 and any(x["flush"] for x in batches)
    assert any(x["waiting_for_kv"] for x in steps) and any(x["preempted"] for x in batches)


@needs_vllm
@pytest.mark.skipif(
    not hasattr(Scheduler._request_blocks_can_be_freed, "__code__"),
    reason="kvcore.scheduler is compiled",
)
def test_offload_async_without_deferred_frees_is_caught(
    oracle_async: tuple[list, list], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduler that frees blocks at once while batches are in flight (vLLM defers
    the frees of a consumer connector, which the offloading connector is) is caught."""
    cases, vllm_lines = oracle_async[0][:MUTANT_CASES], oracle_async[1][:MUTANT_CASES]
    monkeypatch.setattr(Scheduler, "_request_blocks_can_be_freed", lambda self, request: True)
    diffs = [compare(v, run_kvcore_or_error(c, t)) for v, (c, t) in zip(vllm_lines, cases)]
    assert sum(d is not None for d in diffs) >= 3


def _head_first(self: LRUCachePolicy, ordered_keys: list[bytes]) -> None:
    """A broken LRU commit: a finished request's head is made the oldest chunk."""
    self._update_recency(ordered_keys)


@needs_vllm
def test_offload_lru_mutant_is_caught(
    oracle: tuple[list, list, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Evicting a finished request's head before its tail is caught, and the diff
    names the CPU tier's contents."""
    cases, vllm_lines = oracle[0][:MUTANT_CASES], oracle[1][:MUTANT_CASES]
    monkeypatch.setattr(LRUCachePolicy, "on_request_finished", _head_first)
    diffs = [compare(v, run_kvcore_or_error(c, t)) for v, (c, t) in zip(vllm_lines, cases)]
    caught = [d for d in diffs if d is not None]
    assert len(caught) >= 3, len(caught)
    assert any('"cpu"' in d.render() or '"loads"' in d.render() for d in caught)


@needs_vllm
def test_offload_shared_load_mutant_is_caught(
    oracle: tuple[list, list, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that loads chunks another request is loading (instead of waiting
    for that load) is caught: extra load jobs show up in the step lines."""
    cases, vllm_lines = oracle[0][:MUTANT_CASES], oracle[1][:MUTANT_CASES]
    init = OffloadingConnectorScheduler.__init__

    def no_shared_load_wait(self: OffloadingConnectorScheduler, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        self._chunks_being_loaded = None

    monkeypatch.setattr(OffloadingConnectorScheduler, "__init__", no_shared_load_wait)
    diffs = [compare(v, run_kvcore_or_error(c, t)) for v, (c, t) in zip(vllm_lines, cases)]
    caught = [d for d in diffs if d is not None]
    assert len(caught) >= 3, len(caught)
    assert any('"loads"' in d.render() for d in caught)
