"""The scheduler's interface to the KV cache.

Mirrors ``KVCacheBlocks`` and ``KVCacheManager`` of
``vllm/v1/core/kv_cache_manager.py`` and ``PrefixCacheStats`` of
``vllm/v1/metrics/stats.py`` (vLLM 0.33.0), without KV connectors, encoder
caches or speculative drafts (lookahead slots are supported).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from kvcore.kv_cache_block import KVCacheBlock
from kvcore.kv_cache_coordinator import get_kv_cache_coordinator
from kvcore.kv_cache_interface import KVCacheConfig
from kvcore.kv_events import KVCacheEvent
from kvcore.request import Request, RequestStatus
from kvcore.single_type_kv_cache_manager import FullAttentionManager
from kvcore.utils import cdiv


@dataclass(slots=True)
class KVCacheBlocks:
    """Blocks per KV cache group: ``blocks[group][i]`` (mirrors ``KVCacheBlocks``)."""

    blocks: tuple[Sequence[KVCacheBlock], ...]

    def get_block_ids(self) -> tuple[list[int], ...]:
        return tuple([b.block_id for b in group] for group in self.blocks)

    def __add__(self, other: KVCacheBlocks) -> KVCacheBlocks:
        return KVCacheBlocks(tuple(list(a) + list(b) for a, b in zip(self.blocks, other.blocks)))


@dataclass(slots=True)
class PrefixCacheStats:
    """Mirrors ``vllm.v1.metrics.stats.PrefixCacheStats``.

    Prefix-cache counters since the last ``make_prefix_cache_stats`` (tokens).

    Recorded once per admission after a lookup: ``queries`` are the request's tokens,
    ``hits`` its locally cached tokens; previously preempted requests count apart.
    """

    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0
    reset: bool = False

    def merged(self, other: PrefixCacheStats) -> PrefixCacheStats:
        """The counters of this interval and ``other`` together (kvsim's own: a step
        that the engine records with the lookups of an unrecorded one before it)."""
        return PrefixCacheStats(
            requests=self.requests + other.requests,
            queries=self.queries + other.queries,
            hits=self.hits + other.hits,
            preempted_requests=self.preempted_requests + other.preempted_requests,
            preempted_queries=self.preempted_queries + other.preempted_queries,
            preempted_hits=self.preempted_hits + other.preempted_hits,
        )

    def record(self, num_tokens: int, num_hits: int, preempted: bool) -> None:
        if preempted:
            self.preempted_requests += 1
            self.preempted_queries += num_tokens
            self.preempted_hits += num_hits
        else:
            self.requests += 1
            self.queries += num_tokens
            self.hits += num_hits


class KVCacheManager:
    """Mirrors vLLM 0.33.0's ``vllm.v1.core.kv_cache_manager.KVCacheManager``.

    Prefix-cache lookup, slot allocation and release for requests.

    ``watermark`` is a fraction of ``num_blocks`` kept free when admitting waiting
    requests while others run. ``max_in_flight_tokens`` bounds tokens scheduled but
    not yet processed (sizes sliding-window / chunked-local admission caps).
    """

    def __init__(
        self,
        kv_cache_config: KVCacheConfig,
        max_model_len: int,
        enable_caching: bool = True,
        max_in_flight_tokens: int | None = None,
        log_stats: bool = True,
        enable_kv_cache_events: bool = False,
        watermark: float = 0.0,
    ) -> None:
        if watermark < 0.0:
            raise ValueError(f"watermark must be >= 0, got {watermark}")
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.log_stats = log_stats
        self.coordinator = get_kv_cache_coordinator(
            kv_cache_config,
            max_model_len,
            max_model_len if max_in_flight_tokens is None else max_in_flight_tokens,
            enable_caching,
            enable_kv_cache_events,
        )
        self.block_pool = self.coordinator.block_pool
        managers = self.coordinator.single_type_managers
        self._block_size = self.coordinator.block_size
        self.full_attention_managers: tuple[FullAttentionManager, ...] | None = (
            cast("tuple[FullAttentionManager, ...]", managers)
            if managers and all(type(m) is FullAttentionManager for m in managers)
            else None
        )
        """The managers when every group is full attention (no block ever leaves a
        window), else None: enables the decode shortcut and exact fast-forward."""
        self.kv_cache_config = kv_cache_config
        self.num_kv_cache_groups = len(kv_cache_config.kv_cache_groups)
        self.watermark_blocks = int(watermark * kv_cache_config.num_blocks)
        self.prefix_cache_stats = PrefixCacheStats() if log_stats else None
        self.empty_kv_cache_blocks = KVCacheBlocks(
            tuple(() for _ in range(self.num_kv_cache_groups))
        )

    @property
    def unkeyed_unshared_ok(self) -> bool:
        """Whether unshared requests' blocks may be hashed
        :data:`kvcore.kv_cache_block.UNKEYED` until a preemption keys them (a kvsim
        shortcut, :class:`kvcore.block_hashing.UnkeyedHasher`): prefix caching on,
        every group keeps them out of the hash map until then (``UNLISTED_OK``), and
        no KV events publish their hashes (the scheduler adds its connector's part:
        :attr:`kvcore.scheduler.Scheduler.unkeyed_unshared_ok`)."""
        managers = self.coordinator.single_type_managers
        return (
            self.enable_caching
            and not self.block_pool.enable_kv_cache_events
            and all(m.UNLISTED_OK for m in managers)
        )

    @property
    def usage(self) -> float:
        """Fraction of usable blocks in use."""
        return self.block_pool.get_usage()

    def make_prefix_cache_stats(self) -> PrefixCacheStats | None:
        """Return the counters gathered since the last call and start new ones."""
        if not self.log_stats:
            return None
        stats, self.prefix_cache_stats = self.prefix_cache_stats, PrefixCacheStats()
        return stats

    def record_prefix_cache_stats(self, request: Request, num_hits: int) -> None:
        """Count one admission after a lookup (nothing when lookups are off)."""
        if not self.log_stats or not self.enable_caching or request.skip_reading_prefix_cache:
            return
        self.prefix_cache_stats.record(request.num_tokens, num_hits, request.num_preemptions > 0)  # type: ignore[union-attr]

    def get_computed_blocks(
        self, request: Request, max_cache_hit_length: int | None = None
    ) -> tuple[KVCacheBlocks, int]:
        """Cached prefix of the request: (blocks per group, hit length in tokens).

        The last token is never a hit (its logits must be computed), so the default
        bound is ``num_tokens - 1``. The blocks are not referenced yet.
        """
        if not self.enable_caching or request.skip_reading_prefix_cache:
            return self.empty_kv_cache_blocks, 0
        if max_cache_hit_length is None:
            max_cache_hit_length = request.num_tokens - 1
        blocks, hit = self.coordinator.find_longest_cache_hit(
            request.block_hashes, max_cache_hit_length
        )
        return self.create_kv_cache_blocks(blocks), hit

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: KVCacheBlocks | None = None,
        num_lookahead_tokens: int = 0,
        delay_cache_blocks: bool = False,
        full_sequence_must_fit: bool = False,
        reserved_blocks: int = 0,
        has_scheduled_reqs: bool = True,
        num_external_computed_tokens: int = 0,
    ) -> KVCacheBlocks | None:
        """Give the request slots for ``num_new_tokens`` more tokens (plus lookahead).

        Adopts ``new_computed_blocks`` (prefix hits of ``num_new_computed_tokens``
        tokens) first. Returns the newly allocated blocks per group, or None when the
        pool cannot serve the request (the only state change then is the release of
        blocks that left a sliding window). With ``full_sequence_must_fit`` the
        request's whole current sequence must fit before anything is allocated.
        Blocks the scheduled tokens fill are registered in the prefix cache here.

        ``num_external_computed_tokens``: tokens after the prefix hits whose KV a KV
        connector provides (a load from the CPU offload tier); they get blocks like
        computed tokens (first, before the new tokens' blocks) but are not registered
        in the prefix cache here (the caller passes ``delay_cache_blocks`` while the
        load is in flight). Full-attention groups only.

        Why long: it mirrors vLLM's KVCacheManager.allocate_slots (248 lines there) step
        for step: the checks, the removal of skipped blocks, the allocation and the
        caching share its token counts.
        """
        if (
            num_new_tokens == 0
            and num_new_computed_tokens == 0
            and num_external_computed_tokens == 0
        ):
            raise ValueError("num_new_tokens must be > 0 when no computed tokens are adopted")
        full_attention = self.full_attention_managers
        if (
            new_computed_blocks is None
            and not full_sequence_must_fit
            and full_attention is not None
        ):
            return self._allocate_full_attention(
                full_attention,
                request,
                num_new_tokens,
                num_lookahead_tokens,
                delay_cache_blocks,
                reserved_blocks,
                has_scheduled_reqs,
            )
        empty = self.empty_kv_cache_blocks.blocks
        computed_list = new_computed_blocks.blocks if new_computed_blocks is not None else empty
        coordinator = self.coordinator
        request_id = request.request_id
        num_local_computed = request.num_computed_tokens + num_new_computed_tokens
        num_external = num_external_computed_tokens
        if num_external and full_attention is None:
            raise NotImplementedError("external computed tokens need full-attention groups")
        total_computed = min(num_local_computed + num_external, self.max_model_len)
        watermark = 0
        if has_scheduled_reqs and request.status in (
            RequestStatus.WAITING,
            RequestStatus.PREEMPTED,
        ):
            watermark = self.watermark_blocks
        free = self.block_pool.free_block_queue
        if full_sequence_must_fit:
            full_num_tokens = min(request.num_tokens, self.max_model_len)
            need = coordinator.get_num_blocks_to_allocate(
                request_id, full_num_tokens, computed_list, total_computed, apply_admission_cap=True
            )
            if need + watermark > free.num_free_blocks:
                return None
        num_tokens_main = total_computed + num_new_tokens
        num_need_slot = min(num_tokens_main + num_lookahead_tokens, self.max_model_len)
        coordinator.remove_skipped_blocks(
            request_id, max(0, total_computed - request.num_in_flight_tokens)
        )
        need = coordinator.get_num_blocks_to_allocate(
            request_id, num_need_slot, computed_list, num_local_computed + num_external
        )
        if need + watermark > free.num_free_blocks - reserved_blocks:
            return None
        if computed_list is not empty or num_external > 0:
            coordinator.allocate_new_computed_blocks(request_id, computed_list, num_local_computed)
            if num_external > 0:  # allocate_external_computed_blocks (full attention)
                coordinator.allocate_new_blocks(request_id, num_local_computed + num_external)
        new_blocks = coordinator.allocate_new_blocks(request_id, num_need_slot)
        if not delay_cache_blocks and self.enable_caching:
            coordinator.cache_blocks(
                request, min(total_computed + num_new_tokens, request.num_tokens)
            )
        return self.create_kv_cache_blocks(new_blocks)

    def allocate_running_slots(
        self, request: Request, num_new_tokens: int, num_lookahead_tokens: int = 0
    ) -> KVCacheBlocks | None:
        """``allocate_slots(request, num_new_tokens, num_lookahead_tokens=...)`` for a
        request already running (no prefix hits, no admission checks).

        Same result; with one full-attention group, a request whose blocks already hold
        the slots (most decode steps) skips the general bookkeeping: nothing is
        allocated and only newly full blocks are registered, as ``allocate_slots`` does.
        """
        managers = self.full_attention_managers
        if managers is None or len(managers) != 1 or num_new_tokens <= 0:
            return self.allocate_slots(
                request, num_new_tokens, num_lookahead_tokens=num_lookahead_tokens
            )
        m = managers[0]
        request_id = request.request_id
        blocks = m.req_to_blocks.get(request_id)
        max_len = self.max_model_len
        total_computed = request.num_computed_tokens
        if total_computed > max_len:
            total_computed = max_len
        num_need_slot = total_computed + num_new_tokens + num_lookahead_tokens
        if num_need_slot > max_len:
            num_need_slot = max_len
        if blocks is None or -(-num_need_slot // self._block_size) > len(blocks):
            return self._allocate_full_attention(
                managers, request, num_new_tokens, num_lookahead_tokens, False, 0, True
            )
        if self.enable_caching:
            self._cache_full_blocks(request, managers, total_computed + num_new_tokens)
        return self.empty_kv_cache_blocks

    def _cache_full_blocks(
        self, request: Request, managers: Sequence[FullAttentionManager], num_tokens: int
    ) -> None:
        """Register, per group, the blocks the first ``num_tokens`` tokens (at most the
        request's length) fill and that are not registered yet."""
        if num_tokens > len(request._all_token_ids):
            num_tokens = len(request._all_token_ids)
        bs = self._block_size
        num_full = min(num_tokens, len(request.block_hashes) * bs) // bs
        request_id = request.request_id
        for m in managers:
            if m.num_cached_block.get(request_id, 0) < num_full:
                m.cache_blocks(request, num_tokens)

    def _allocate_full_attention(
        self,
        managers: Sequence[FullAttentionManager],
        request: Request,
        num_new_tokens: int,
        num_lookahead_tokens: int,
        delay_cache_blocks: bool,
        reserved_blocks: int,
        has_scheduled_reqs: bool,
    ) -> KVCacheBlocks | None:
        """``allocate_slots`` without prefix hits when every group is full attention.

        Same result as the general path, which then skips no blocks, adopts no hits
        and needs ``cdiv(tokens, block_size) - held`` new blocks per group; this
        shortcut only avoids its generic bookkeeping (the per-step decode path).
        """
        max_len = self.max_model_len
        request_id = request.request_id
        total_computed = min(request.num_computed_tokens, max_len)
        num_need_slot = min(total_computed + num_new_tokens + num_lookahead_tokens, max_len)
        required = -(-num_need_slot // self._block_size)
        need = 0
        for m in managers:
            blocks = m.req_to_blocks.get(request_id)
            held = len(blocks) if blocks else 0
            if required > held:
                need += required - held
        watermark = 0
        if has_scheduled_reqs and request.status in (
            RequestStatus.WAITING,
            RequestStatus.PREEMPTED,
        ):
            watermark = self.watermark_blocks
        if need + watermark > self.block_pool.free_block_queue.num_free_blocks - reserved_blocks:
            return None
        new_blocks = (
            tuple(m.allocate_new_blocks(request_id, num_need_slot) for m in managers)
            if need
            else None
        )
        if self.enable_caching and not delay_cache_blocks:
            self._cache_full_blocks(request, managers, total_computed + num_new_tokens)
        if new_blocks is None:
            return self.empty_kv_cache_blocks
        return self.create_kv_cache_blocks(new_blocks)

    def free(self, request: Request) -> None:
        """Release all of the request's blocks (tail blocks become evictable first)."""
        self._list_if_resumable(request)
        self.coordinator.free(request.request_id)

    def pop_blocks_for_free(self, request: Request) -> list[KVCacheBlock]:
        """Mirrors ``KVCacheManager.pop_blocks_for_free``: forget the request's blocks
        without freeing them; hand them to :meth:`free_popped_blocks` later."""
        self._list_if_resumable(request)
        return self.coordinator.pop_blocks_for_free(request.request_id)

    def _list_if_resumable(self, request: Request) -> None:
        """An unshared request freed before it finished (preempted) looks its blocks
        up when it is admitted again: its cached blocks that the pool keeps out of the
        hash map go there now (a finished one's are never looked up)."""
        if request.unshared and not request.is_finished():
            for blocks in self.coordinator.get_blocks(request.request_id):
                self.block_pool.list_blocks(blocks, request.block_hashes)

    def free_popped_blocks(self, blocks: list[KVCacheBlock]) -> None:
        """Free blocks from :meth:`pop_blocks_for_free`, tail first (vLLM's
        ``block_pool.free_blocks(reversed(blocks))`` of ``_drain_deferred_frees``)."""
        self.block_pool.free_blocks(reversed(blocks))

    def get_block_ids_for_computed_tokens(
        self, request_id: str, num_computed_tokens: int
    ) -> tuple[list[int], ...]:
        """Mirrors ``get_block_ids_for_computed_tokens``: per group, the block ids that
        cover the first ``num_computed_tokens`` tokens (attention groups only)."""
        size = self._block_size
        return tuple(
            ids[: cdiv(num_computed_tokens, size)] for ids in self.get_block_ids(request_id)
        )

    def reset_prefix_cache(self) -> bool:
        """Forget the prefix cache; fails (False) while any block is in use."""
        if not self.coordinator.reset_prefix_cache():
            return False
        if self.log_stats:
            self.prefix_cache_stats.reset = True  # type: ignore[union-attr]
        return True

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        if self.enable_caching:
            self.coordinator.cache_blocks(request, num_computed_tokens)

    def take_events(self) -> list[KVCacheEvent]:
        return self.block_pool.take_events()

    def get_blocks(self, request_id: str) -> KVCacheBlocks:
        return self.create_kv_cache_blocks(self.coordinator.get_blocks(request_id))

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        return self.get_blocks(request_id).get_block_ids()

    def create_kv_cache_blocks(self, blocks: tuple[Sequence[KVCacheBlock], ...]) -> KVCacheBlocks:
        return KVCacheBlocks(blocks) if any(blocks) else self.empty_kv_cache_blocks

    def check_invariants(self, popped: Iterable[Sequence[KVCacheBlock]] = ()) -> None:
        """Pool invariants plus: every held block referenced once per holder, no block
        held twice in one table, ref counts equal the number of tables holding a block
        (``popped``: block lists taken by :meth:`pop_blocks_for_free` and not yet
        freed, each one holder)."""
        self.block_pool.check_invariants()
        holders: dict[int, int] = {}
        for blocks in popped:
            for b in blocks:
                holders[b.block_id] = holders.get(b.block_id, 0) + 1
        for m in self.coordinator.single_type_managers:
            for rid, blocks in m.req_to_blocks.items():
                seen = set()
                for b in blocks:
                    if b.is_null:
                        continue
                    assert b.block_id not in seen, f"request {rid} holds block {b.block_id} twice"
                    seen.add(b.block_id)
                    holders[b.block_id] = holders.get(b.block_id, 0) + 1
                num_cached = m.num_cached_block.get(rid, 0)
                assert num_cached <= len(blocks), f"request {rid} caches past its table"
        for b in self.block_pool.blocks:
            if not b.is_null:
                held = holders.get(b.block_id, 0)
                assert b.ref_cnt == held, f"block {b.block_id}: ref_cnt {b.ref_cnt}, held {held}x"
