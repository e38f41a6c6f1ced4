"""Unshared requests' blocks hashed ``UNKEYED`` until a preemption gives them keys of
their own (:class:`kvcore.block_hashing.UnkeyedHasher`, ``BlockPool.list_blocks``): the
blocks a content hasher would hash, keys that only their request's lookup finds, the
engines' choice of hasher, and the stretch planners that compare first blocks. Whole
runs with preemptions are byte-identical to eager content hashing
(tests/test_unshared_blocks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import simpy

from kvcore.async_scheduler import AsyncScheduler
from kvcore.batch_queue import BatchQueue, sample_fixed_token
from kvcore.block_hashing import FastBlockHasher, UnkeyedHasher
from kvcore.fast_forward_async_plan import plan_async_decode_stretch
from kvcore.join_foresight import JoinForesight
from kvcore.kv_cache_block import UNKEYED
from kvcore.kv_cache_manager import KVCacheManager
from kvcore.request import Request, RequestStatus
from kvcore.scheduler import Scheduler
from kvcore.scheduler_config import SchedulerConfig
from kvcore.stretch_joins import Join
from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec
from sim.app.setup import resolve_run
from sim.engine.cluster import Cluster
from sim.engine.replica_parts import kvcore_request
from sim.engine.router import make_router
from sim.records.recorders import StepRecorder
from sim.records.request_recorder import RequestRecorder
from tests.kv_cache_helpers import BLOCK, kv_config, kv_manager
from workloads.process import draw_prompt
from workloads.request import SimRequest

SAMPLE = 7


def _unshared(rid: str, tokens: list[int], max_tokens: int = 16) -> Request:
    return Request(rid, tokens, max_tokens, block_hasher=UnkeyedHasher(BLOCK), unshared=True)


def _preempt(kvm: KVCacheManager, req: Request) -> None:
    """Free ``req`` while it runs (a preemption), ready for its next admission."""
    req.status = RequestStatus.RUNNING
    kvm.free(req)
    req.status = RequestStatus.PREEMPTED
    req.num_computed_tokens = 0


@pytest.mark.parametrize("lookahead", [0, 3])
def test_unkeyed_hasher_hashes_the_blocks_a_content_hasher_would(lookahead: int) -> None:
    hashers = (FastBlockHasher(BLOCK, lookahead), UnkeyedHasher(BLOCK, lookahead))
    reqs = [Request("r", list(range(40)), 100, block_hasher=h) for h in hashers]
    for step in range(60):
        lengths = {len(r.block_hashes) for r in reqs}
        assert len(lengths) == 1, f"after {step} outputs: {lengths}"
        for r in reqs:
            if step % 7 == 6:  # several tokens at once (speculative decoding's)
                r.append_output_token_ids([step, step + 1])
            else:
                r.append_output_token_id(step)
    assert len(reqs[1].block_hashes) >= 6
    assert set(reqs[1].block_hashes) == {UNKEYED}
    assert UNKEYED not in reqs[0].block_hashes


def test_a_preemption_keys_the_blocks_and_only_their_request_finds_them() -> None:
    kvm = kv_manager()
    pool = kvm.block_pool
    # The same ids in both: only a test gives two unshared requests one content.
    a, b = _unshared("a", list(range(48))), _unshared("b", list(range(48)))
    for req in (a, b):
        assert kvm.allocate_slots(req, 48) is not None
        req.num_computed_tokens = 48
    assert a.block_hashes == [UNKEYED] * 3
    assert kvm.get_computed_blocks(_unshared("c", list(range(48))))[1] == 0
    owned = {r.request_id: [blk.block_id for blk in kvm.get_blocks(r.request_id).blocks[0]]
             for r in (a, b)}  # fmt: skip
    _preempt(kvm, a)
    _preempt(kvm, b)
    keys = a.block_hashes + b.block_hashes
    assert len(set(keys)) == 6 and min(keys) >= 1 << 64
    pool.check_invariants()
    for req in (a, b):
        blocks, hit = kvm.get_computed_blocks(req)
        assert hit == 32  # two blocks: the last token is never a hit
        assert [blk.block_id for blk in blocks.blocks[0]] == owned[req.request_id][:2]
    # Admitted again: its new blocks go unkeyed, and the next preemption keys them only.
    blocks, hit = kvm.get_computed_blocks(a)
    assert kvm.allocate_slots(a, 48 - hit, hit, blocks) is not None
    a.num_computed_tokens = 48
    a.append_output_token_ids(list(range(16)))
    assert kvm.allocate_slots(a, 16) is not None
    a.num_computed_tokens = 64
    assert a.block_hashes[:3] == keys[:3] and a.block_hashes[3] == UNKEYED
    _preempt(kvm, a)
    assert a.block_hashes[:3] == keys[:3] and a.block_hashes[3] > max(keys)
    assert kvm.get_computed_blocks(a)[1] == 48
    pool.check_invariants()


def test_two_full_attention_groups_key_a_block_alike() -> None:
    kvm = kv_manager(groups=("full", "full"))
    a = _unshared("a", list(range(48)))
    assert kvm.allocate_slots(a, 48) is not None
    a.num_computed_tokens = 48
    _preempt(kvm, a)
    for blocks in kvm.get_computed_blocks(a)[0].blocks:
        assert [blk._hash for blk in blocks] == a.block_hashes[:2]
    assert kvm.get_computed_blocks(a)[1] == 32
    kvm.block_pool.check_invariants()


def test_unkeyed_hashes_only_where_no_one_else_reads_them() -> None:
    assert kv_manager().unkeyed_unshared_ok
    assert kv_manager(groups=("full", "full")).unkeyed_unshared_ok
    assert not kv_manager(groups=("full", "sliding")).unkeyed_unshared_ok  # listed at once
    assert not kv_manager(enable_kv_cache_events=True).unkeyed_unshared_ok  # published
    assert not kv_manager(enable_caching=False).unkeyed_unshared_ok


@pytest.mark.parametrize("offload", [None, 2.0])
def test_the_engines_hash_unshared_requests_unkeyed_without_a_connector(
    tmp_path: Path, offload: float | None
) -> None:
    resolved = resolve_run(
        RunSpec(workload="chat", engine=EngineConfig(kv_offloading_size=offload))
    )
    steps = StepRecorder(tmp_path / "steps.csv")
    requests = RequestRecorder(tmp_path / "requests.csv")
    try:
        cluster = Cluster(
            simpy.Environment(), resolved, 1, make_router("round_robin"), steps, requests
        )
        unkeyed = isinstance(cluster.hasher.for_unshared, UnkeyedHasher)
        # The offload tier keys what it stores by block hash: content hashes there.
        assert unkeyed == (offload is None)
        assert cluster.hasher.for_unshared is cluster.hasher or unkeyed
        for unshared in (False, True):
            sr = SimRequest("r", 0.0, list(range(40)), 4, unshared=unshared)
            prepared = cluster.prepare_prompt(sr)
            assert prepared is not None
            assert prepared.unread_tokens == (40 if unshared and unkeyed else 32)
            hashes = kvcore_request(sr, 0.0, cluster.hasher).block_hashes
            assert hashes == prepared.block_hashes and len(hashes) == 2
            assert (hashes == [UNKEYED] * 2) == (unshared and unkeyed)
        # Drawn ahead: an unkeyed prompt's ids are never read, so never drawn.
        built: list[int] = []
        lazy = SimRequest(
            "l", 0.0, None, 4, num_prompt_tokens=40, unshared=True,
            build_prompt=lambda: built.append(1) or list(range(40)),
        )  # fmt: skip
        num_tokens, tail, hashes = draw_prompt(lazy, cluster.prepare_prompt, "l")
        assert num_tokens == 40 and len(hashes) == 2
        assert (len(tail), built) == ((0, []) if unkeyed else (8, [1]))
    finally:
        steps.close()
        requests.close()


def test_join_foresight_takes_unshared_joins() -> None:
    """No two unshared requests share a first block, though both are UNKEYED."""
    config = kv_config(("full",), 200)
    sched = Scheduler(
        SchedulerConfig(max_model_len=4096, max_num_batched_tokens=4096, max_num_seqs=64), config
    )
    sched.add_request(_unshared("a", list(range(40))))
    sched.schedule()
    fs = JoinForesight(sched, [_unshared("b", list(range(100, 140)))])
    assert fs.prefill(_unshared("c", list(range(200, 240)))) == 40
    assert fs.prefill(_unshared("d", list(range(300, 350)))) == 50


def test_first_prefills_take_unshared_joins() -> None:
    """A running unshared request's block filled in iteration 1 and two unshared joins:
    no join can hit it or each other."""
    sched = AsyncScheduler(
        SchedulerConfig(max_model_len=4096, max_num_batched_tokens=4096, max_num_seqs=64),
        kv_config(("full",), 100),
    )
    queue = BatchQueue(sched, sample_fixed_token(SAMPLE))
    sched.add_request(_unshared("a", list(range(31)), max_tokens=40))  # 32nd token: block 2
    queue.step()
    queue.step()
    joins = [Join(1, _unshared(rid, list(range(s, s + 40)))) for rid, s in (("x", 500), ("y", 600))]
    plan = plan_async_decode_stretch(queue, 12, True, joins)
    assert plan is not None and len(plan.joins) == 2
    foreseen = plan.first_prefills()
    assert foreseen == [40, 40]
    plan.apply(2, SAMPLE)  # the admissions compute what was foreseen
    assert [j.request.num_prompt_tokens - j.request.num_cached_tokens for j in joins] == foreseen
