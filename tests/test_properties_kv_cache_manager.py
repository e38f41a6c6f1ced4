"""Property tests of ``kvcore.kv_cache_manager.KVCacheManager``.

A Hypothesis state machine plays the scheduler's part on one manager: requests
with prompts drawn from a few shared prefixes arrive, are looked up
(``get_computed_blocks``) and admitted (``allocate_slots`` with their hits and a
random chunk), advance by random prefill chunks and then by one token per decode
step (a sampled token is appended when a prefill completes), are preempted when
allocation fails, finish, and the prefix cache is reset. KV cache groups are full
attention only, or full attention + sliding window. After every operation
``check_invariants`` must hold, plus the checks here: hits are block aligned, at
most ``num_tokens - 1``, and exactly the cached chain of the request's hashes;
tables cover the computed tokens; waiting requests hold nothing; the pool is idle
exactly when no request holds a block.

Operation count per CI run (each manager call is one operation; the counter
``OPS`` is checked at the end of the state machine's test): ``max_examples=240``
runs of ``stateful_step_count=200`` steps are at most 48,000 steps; Hypothesis
ends many runs early and some steps (``add_request``) call no manager method,
while an admission makes two calls (lookup + allocation): about 36,000 operations
run, the floor asserted is 28,000. With the other two property modules (floors
45,000 and 50,000) a CI run executes at least 123,000 random operations.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kvcore.block_hashing import BlockHasher
from kvcore.kv_cache_manager import KVCacheManager
from kvcore.replay import ReplayConfig
from kvcore.request import Request, RequestStatus
from kvcore.utils import cdiv

MAX_EXAMPLES = 240
STEPS_PER_EXAMPLE = 200
MIN_OPS = 28_000
MAX_MODEL_LEN = 96
SAMPLE_TOKEN = 7
PREFIXES = [[100 + p] * 8 + list(range(p * 50, p * 50 + 40)) for p in range(3)]
"""Shared prompt prefixes (48 tokens each)."""

OPS = {"count": 0}
"""KV cache manager calls executed by the state machine in this process."""

SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    stateful_step_count=STEPS_PER_EXAMPLE,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


class KVCacheManagerMachine(RuleBasedStateMachine):
    """Scheduler-like use of one KVCacheManager with full and sliding-window groups."""

    def __init__(self) -> None:
        super().__init__()
        self.kvm: KVCacheManager | None = None
        self.waiting: dict[str, Request] = {}
        self.running: dict[str, Request] = {}
        self.next_id = 0

    @initialize(
        block_size=st.sampled_from([1, 2, 4, 8, 16]),
        hybrid=st.booleans(),
        sliding_window=st.integers(1, 40),
        extra_blocks=st.integers(0, 40),
        watermark=st.sampled_from([0.0, 0.0, 0.1]),
        enable_caching=st.sampled_from([True, True, True, False]),
    )
    def make_manager(
        self,
        block_size: int,
        hybrid: bool,
        sliding_window: int,
        extra_blocks: int,
        watermark: float,
        enable_caching: bool,
    ) -> None:
        kinds = ("full", "sliding_window") if hybrid else ("full",)
        # Enough blocks for one request of max_model_len in every group, so a lone
        # request always fits; extra blocks let several run at once.
        num_blocks = len(kinds) * cdiv(MAX_MODEL_LEN, block_size) + 2 + extra_blocks
        config = ReplayConfig(
            block_size=block_size,
            num_gpu_blocks=num_blocks,
            kv_groups=kinds,
            sliding_window=sliding_window if hybrid else None,
        )
        self.block_size = block_size
        self.hybrid = hybrid
        self.kvm = KVCacheManager(
            config.kv_cache_config(),
            MAX_MODEL_LEN,
            enable_caching=enable_caching,
            watermark=watermark,
        )
        self.hasher = BlockHasher.from_name(block_size, "xxhash")

    # -- helpers -------------------------------------------------------------------

    def _allocate(self, req: Request, n: int, **kwargs: object) -> bool:
        """allocate_slots + the state a scheduler step would leave; False if refused."""
        free_before = self.kvm.block_pool.get_num_free_blocks()
        held_before = [list(b) for b in self.kvm.coordinator.get_blocks(req.request_id)]
        new_blocks = self.kvm.allocate_slots(req, n, **kwargs)
        OPS["count"] += 1
        if new_blocks is None:
            if not self.hybrid:
                assert self.kvm.block_pool.get_num_free_blocks() == free_before
                assert [
                    list(b) for b in self.kvm.coordinator.get_blocks(req.request_id)
                ] == held_before, "a refused allocation changed the block table"
            return False
        req.num_computed_tokens += kwargs.get("num_new_computed_tokens", 0) + n
        for blocks in self.kvm.coordinator.get_blocks(req.request_id):
            assert len(blocks) == cdiv(req.num_computed_tokens, self.block_size), (
                "the table does not cover exactly the computed tokens"
            )
        if self.kvm.enable_caching:
            num_full = min(req.num_computed_tokens, req.num_tokens) // self.block_size
            full_blocks = self.kvm.coordinator.get_blocks(req.request_id)[0]
            for i in range(num_full):
                assert full_blocks[i].block_hash == req.block_hashes[i] + bytes(4), (
                    f"full block {i} of {req.request_id} is not cached under its hash"
                )
        if req.num_computed_tokens == req.num_tokens:
            req.append_output_token_ids(SAMPLE_TOKEN)
            if req.num_tokens >= MAX_MODEL_LEN or req.num_output_tokens >= req.max_tokens:
                self._finish(req.request_id)  # (still in ``waiting`` when just admitted)
        return True

    def _preempt(self, rid: str) -> None:
        req = self.running.pop(rid)
        self.kvm.free(req)
        OPS["count"] += 1
        req.status = RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.waiting[rid] = req

    def _finish(self, rid: str) -> None:
        req = self.running.pop(rid, None) or self.waiting[rid]
        self.kvm.free(req)
        OPS["count"] += 1
        req.status = RequestStatus.FINISHED_LENGTH_CAPPED

    # -- rules ---------------------------------------------------------------------

    @precondition(lambda self: self.kvm is not None and len(self.waiting) < 8)
    @rule(
        prefix=st.integers(0, len(PREFIXES) - 1),
        prefix_len=st.integers(0, 48),
        suffix=st.lists(st.integers(0, 3), max_size=30),
        max_tokens=st.integers(1, 30),
    )
    def add_request(self, prefix: int, prefix_len: int, suffix: list[int], max_tokens: int) -> None:
        prompt = (PREFIXES[prefix][:prefix_len] + suffix)[: MAX_MODEL_LEN - 1] or [1]
        rid = f"r{self.next_id}"
        self.next_id += 1
        self.waiting[rid] = Request(rid, prompt, max_tokens, block_hasher=self.hasher)

    @precondition(lambda self: self.kvm is not None and self.waiting)
    @rule(data=st.data(), chunk=st.integers(1, 64), has_scheduled=st.booleans())
    def admit(self, data: st.DataObject, chunk: int, has_scheduled: bool) -> None:
        """Lookup + first allocation of a waiting request (its hits are adopted)."""
        rid = data.draw(st.sampled_from(sorted(self.waiting)))
        req = self.waiting[rid]
        computed, hit = self.kvm.get_computed_blocks(req)
        OPS["count"] += 1
        bs = self.block_size
        assert 0 <= hit <= req.num_tokens - 1, f"hit {hit} of a {req.num_tokens}-token request"
        assert hit % bs == 0, f"hit {hit} not aligned to block size {bs}"
        if hit:
            for gid, blocks in enumerate(computed.blocks):
                assert len(blocks) == hit // bs
                for i, b in enumerate(blocks):
                    if gid == 0 or not b.is_null:
                        assert b.block_hash == req.block_hashes[i] + gid.to_bytes(4, "big"), (
                            "a hit block does not hold the request's content"
                        )
            assert self.kvm.enable_caching
        n = min(chunk, req.num_tokens - hit)
        if self._allocate(
            req,
            n,
            num_new_computed_tokens=hit,
            new_computed_blocks=computed,
            full_sequence_must_fit=data.draw(st.booleans()),
            has_scheduled_reqs=has_scheduled,
        ):
            del self.waiting[rid]
            if not req.is_finished():  # a one-token request may finish at once
                req.status = RequestStatus.RUNNING
                self.running[rid] = req

    @precondition(lambda self: self.kvm is not None and self.running)
    @rule(data=st.data(), chunk=st.integers(1, 64), preempt=st.booleans())
    def advance(self, data: st.DataObject, chunk: int, preempt: bool) -> None:
        """Next prefill chunk or decode token; on refusal preempt it (or the newest)."""
        rid = data.draw(st.sampled_from(sorted(self.running)))
        req = self.running[rid]
        n = min(
            chunk,
            req.num_tokens - req.num_computed_tokens,
            MAX_MODEL_LEN - req.num_computed_tokens - 1,
        )
        assert n > 0, f"{rid} has nothing to compute"
        if not self._allocate(req, n):
            victim = rid if preempt else max(self.running, key=lambda r: int(r[1:]))
            self._preempt(victim)

    @precondition(lambda self: self.kvm is not None and self.running)
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        self._finish(data.draw(st.sampled_from(sorted(self.running))))

    @precondition(lambda self: self.kvm is not None)
    @rule()
    def reset_prefix_cache(self) -> None:
        ok = self.kvm.reset_prefix_cache()
        OPS["count"] += 1
        busy = any(
            not b.is_null
            for r in self.running
            for blocks in self.kvm.coordinator.get_blocks(r)
            for b in blocks
        )
        assert ok == (not busy), f"reset_prefix_cache returned {ok} with busy={busy}"
        if ok:
            assert not self.kvm.block_pool.cached_block_hash_to_block

    # -- checks --------------------------------------------------------------------

    @invariant()
    def consistent(self) -> None:
        kvm = self.kvm
        if kvm is None:
            return
        kvm.check_invariants()
        pool = kvm.block_pool
        for rid in self.waiting:
            assert not any(kvm.coordinator.get_blocks(rid)), f"waiting {rid} holds blocks"
        for m in kvm.coordinator.single_type_managers:
            # A refused admission may leave an empty table behind (as vLLM's defaultdict).
            for rid, blocks in m.req_to_blocks.items():
                assert rid in self.running or not blocks, f"{rid} holds blocks, not running"
            assert set(m.num_cached_block) <= set(self.running), "stale cached-block count"
        usable = pool.num_gpu_blocks - 1
        assert kvm.usage == pytest.approx(1.0 - pool.get_num_free_blocks() / usable)
        if not self.running:
            assert pool.get_num_free_blocks() == usable, "blocks leaked with no request running"


def test_kv_cache_manager_state_machine() -> None:
    """The state machine, and that it really executed the promised number of
    operations (checked here, in the same test, whatever runs the tests and where)."""
    before = OPS["count"]
    run_state_machine_as_test(KVCacheManagerMachine, settings=SETTINGS)
    ran = OPS["count"] - before
    assert ran >= MIN_OPS, f"only {ran} KV cache manager operations ran"
