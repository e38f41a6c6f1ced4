"""Differential conformance of P/D disaggregation (vLLM's NIXL connector, scheduler
side) against vLLM 0.33.0 itself.

vLLM's real ``Scheduler`` (and, in half of the cases, its ``AsyncScheduler`` behind
its own engine-core batch queue) is built on a CPU with ``KVTransferConfig(
kv_connector="NixlConnector" or "NixlPushConnector", kv_role="kv_producer" |
"kv_consumer")``, so its NIXL scheduler side runs unmodified (it needs no ``nixl``
library). Only the worker role is replaced, on both sides by the same
``sim.conformance.pd_worker.FakeNixlWorker`` (receives and sends finish a fixed
number of batches after they are handed over; some loads fail; some leases run out
unread). kvcore replays each case with its ``Scheduler`` / ``AsyncScheduler`` and
``NixlConnectorScheduler``; every step line must be equal (see
:mod:`sim.conformance.pd`). One deviation is fixed on the vLLM side: the set of
finished request ids iterates sorted (vLLM's order follows string hashing).

Skipped when the oracle environment (.venv-vllm) is absent.
"""

from __future__ import annotations

import os

import pytest

from kvcore.nixl_connector import NixlConnectorScheduler
from kvcore.scheduler import Scheduler
from sim.conformance.differential import DEFAULT_VLLM_PYTHON
from sim.conformance.pd import compare, run_kvcore_or_error, run_oracle
from sim.conformance.pd_cases import coverage, early_free, random_case

NUM_CASES = 50
"""Per role and scheduler: 100 traces per role, half of them async."""
MUTANT_CASES = 20
SEED = int(os.environ.get("KVSIM_CONFORMANCE_SEED", 0))
KINDS = [(role, a) for role in ("prefill", "decode") for a in (False, True)]
needs_vllm = pytest.mark.skipif(
    not DEFAULT_VLLM_PYTHON.exists(),
    reason="oracle environment .venv-vllm (vLLM 0.33.0) missing; "
    "create it with scripts/setup_vllm_oracle.sh",
)


@pytest.fixture(scope="module")
def oracle() -> dict[tuple[str, bool], tuple[list, list]]:
    """Per (role, async): the cases and vLLM's step lines for each; one oracle run for
    every test of the module (the mutants replay the first ``MUTANT_CASES``)."""
    if not DEFAULT_VLLM_PYTHON.exists():
        pytest.skip("oracle environment .venv-vllm (vLLM 0.33.0) missing")
    cases = {k: [random_case(SEED, i, *k) for i in range(NUM_CASES)] for k in KINDS}
    flat = [c for k in KINDS for c in cases[k]]
    lines = run_oracle(str(DEFAULT_VLLM_PYTHON), flat, timeout=1200)
    return {k: (cases[k], lines[j * NUM_CASES : (j + 1) * NUM_CASES]) for j, k in enumerate(KINDS)}


@needs_vllm
@pytest.mark.parametrize("kind", KINDS, ids=[f"{r}-{'async' if a else 'sync'}" for r, a in KINDS])
def test_pd_matches_vllm(oracle: dict, kind: tuple[str, bool]) -> None:
    cases, vllm_lines = oracle[kind]
    assert vllm_lines[0][0]["vllm_version"] == "0.33.0"
    ours = [run_kvcore_or_error(c, t) for c, t in cases]
    diffs = [(i, compare(v, k)) for i, (v, k) in enumerate(zip(vllm_lines, ours))]
    bad = [(i, d) for i, d in diffs if d is not None]
    assert not bad, f"seed {SEED} {kind}: {len(bad)} of {NUM_CASES} cases differ\n" + "\n".join(
        f"case {i} {cases[i][0]}: {d.render()}" for i, d in bad[:3]
    )
    counts = coverage(ours)
    role = kind[0]
    wanted = (
        ("sends", "not_processed", "push_finished", "steps_with_held_blocks")
        if role == "prefill"
        else ("loads", "failed_loads", "notify_only_recvs", "push_registrations")
        + ("preemptions", "abort_while_loading")
    )
    assert all(counts[k] > 0 for k in wanted), counts
    assert {c["kv_load_failure_policy"] for c, _ in cases} == {"fail", "recompute"}
    assert sum(len(x) for x in ours) > 30 * NUM_CASES


def _mutant_caught(oracle: dict, kind: tuple[str, bool], n: int = MUTANT_CASES) -> list:
    cases, vllm_lines = oracle[kind][0][:n], oracle[kind][1][:n]
    diffs = [compare(v, run_kvcore_or_error(c, t)) for v, (c, t) in zip(vllm_lines, cases)]
    return [d for d in diffs if d is not None]


@needs_vllm
def test_pd_early_free_mutant_is_caught(oracle: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prefill side that frees a finished request's blocks at once (instead of
    holding them for the decode side's read) is caught, with a readable diff."""
    monkeypatch.setattr(NixlConnectorScheduler, "request_finished", early_free)
    caught = _mutant_caught(oracle, ("prefill", False))
    assert len(caught) >= 3, len(caught)
    assert any('"held"' in d.render() and '"free_blocks"' in d.render() for d in caught)


@needs_vllm
@pytest.mark.skipif(
    not hasattr(Scheduler._request_blocks_can_be_freed, "__code__"),
    reason="kvcore.scheduler is compiled",
)
def test_pd_no_deferred_free_mutant_is_caught(
    oracle: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decode side under async scheduling that frees (and preempts) without waiting
    for the batch in flight is caught."""
    monkeypatch.setattr(Scheduler, "_request_blocks_can_be_freed", lambda self, request: True)
    assert len(_mutant_caught(oracle, ("decode", True))) >= 2


@needs_vllm
def test_pd_keep_stale_mutant_is_caught(oracle: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prefill side under async scheduling that delivers the output in flight of a
    preempted request (vLLM drops it: the preemption freed the blocks its hand-off
    needs) is caught."""
    init = NixlConnectorScheduler.__init__

    def keep_stale(self: NixlConnectorScheduler, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        init(self, *args, **kwargs)
        self.requires_kv_delivery = False

    monkeypatch.setattr(NixlConnectorScheduler, "__init__", keep_stale)
    assert len(_mutant_caught(oracle, ("prefill", True), NUM_CASES)) >= 2
