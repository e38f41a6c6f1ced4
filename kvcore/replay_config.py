"""The knobs of a trace replay (:mod:`kvcore.replay`) and the scheduler they build.

Names and defaults follow vLLM 0.33.0's engine arguments; the scheduler is a
:class:`kvcore.scheduler.Scheduler` (an :class:`kvcore.async_scheduler.AsyncScheduler`
with ``async_scheduling``) over a tiny KV cache config of the chosen groups.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcore.async_scheduler import AsyncScheduler
from kvcore.block_hashing import DEFAULT_NONE_HASH_SEED
from kvcore.kv_cache_interface import (
    AttentionSpec,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from kvcore.replay_trace import TraceRequest
from kvcore.scheduler import Scheduler
from kvcore.scheduler_config import SchedulerConfig
from kvcore.spec_decode import SpeculativeConfig

KV_GROUP_KINDS = ("full", "sliding_window", "chunked_local")


@dataclass(frozen=True)
class ReplayConfig:
    """Replay knobs; names and defaults follow vLLM 0.33.0's engine arguments.

    ``max_model_len`` None means the trace's largest prompt + max_tokens.
    ``kv_groups`` lists one attention kind per KV cache group.
    ``async_scheduling``: replay vLLM's async engine loop (an ``AsyncScheduler``
    driven through a batch queue of 2) instead of the synchronous one.
    """

    block_size: int = 16
    num_gpu_blocks: int = 1024
    max_num_seqs: int = 128
    max_num_batched_tokens: int = 2048
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    long_prefill_token_threshold: int = 0
    policy: str = "fcfs"
    watermark: float = 0.0
    scheduler_reserve_full_isl: bool = True
    kv_groups: tuple[str, ...] = ("full",)
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    prefix_caching_hash_algo: str = "sha256"
    max_model_len: int | None = None
    sample_token_id: int = 7
    num_lookahead_tokens: int = 0
    enable_kv_cache_events: bool = False
    dump_block_tables: bool = False
    none_hash_seed: str = DEFAULT_NONE_HASH_SEED
    async_scheduling: bool = False
    num_speculative_tokens: int = 0
    speculative_method: str = "ngram"

    def __post_init__(self) -> None:
        checks = [
            ("block_size", self.block_size, 1),
            ("num_gpu_blocks", self.num_gpu_blocks, 2),
            ("max_num_seqs", self.max_num_seqs, 1),
            ("max_num_batched_tokens", self.max_num_batched_tokens, 1),
            ("long_prefill_token_threshold", self.long_prefill_token_threshold, 0),
            ("sample_token_id", self.sample_token_id, 0),
            ("num_lookahead_tokens", self.num_lookahead_tokens, 0),
            ("num_speculative_tokens", self.num_speculative_tokens, 0),
        ]
        for name, value, low in checks:
            if not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"watermark must be in [0, 1), got {self.watermark}")
        if not self.kv_groups:
            raise ValueError("kv_groups must name at least one group")
        for kind in self.kv_groups:
            if kind not in KV_GROUP_KINDS:
                raise ValueError(
                    f"kv_groups: unknown kind {kind!r}; allowed: {', '.join(KV_GROUP_KINDS)}"
                )
        if "sliding_window" in self.kv_groups and (self.sliding_window or 0) < 1:
            raise ValueError("kv_groups has sliding_window: set sliding_window to an integer >= 1")
        if "chunked_local" in self.kv_groups and (self.attention_chunk_size or 0) < 1:
            raise ValueError(
                "kv_groups has chunked_local: set attention_chunk_size to an integer >= 1"
            )
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be an integer >= 2, got {self.max_model_len}")
        from kvcore.block_hashing import get_hash_fn_by_name

        get_hash_fn_by_name(self.prefix_caching_hash_algo)
        self.speculative_config()  # raises on an unknown method

    def speculative_config(self) -> SpeculativeConfig | None:
        if self.num_speculative_tokens == 0:
            return None
        return SpeculativeConfig(self.speculative_method, self.num_speculative_tokens)

    def kv_cache_spec(self, kind: str) -> AttentionSpec:
        """A tiny spec of one group: block counts matter here, not bytes."""
        if kind == "sliding_window":
            return SlidingWindowSpec(block_size=self.block_size, sliding_window=self.sliding_window)
        if kind == "chunked_local":
            return ChunkedLocalAttentionSpec(
                block_size=self.block_size, attention_chunk_size=self.attention_chunk_size
            )
        return FullAttentionSpec(block_size=self.block_size)

    def kv_cache_config(self) -> KVCacheConfig:
        groups = [
            KVCacheGroupSpec([f"layer.{i}"], self.kv_cache_spec(kind))
            for i, kind in enumerate(self.kv_groups)
        ]
        return KVCacheConfig(
            num_blocks=self.num_gpu_blocks, kv_cache_tensors=[], kv_cache_groups=groups
        )


def resolve_max_model_len(config: ReplayConfig, trace: list[TraceRequest]) -> int:
    """The replay's ``max_model_len``: the config's, or the trace's largest prompt +
    ``max_tokens`` (tokens)."""
    if config.max_model_len is not None:
        return config.max_model_len
    return max(len(r.prompt_token_ids) + r.max_tokens for r in trace)


def build_scheduler(config: ReplayConfig, max_model_len: int) -> Scheduler:
    """The scheduler a replay with ``config`` drives."""
    sched_config = SchedulerConfig(
        max_model_len=max_model_len,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_num_seqs=config.max_num_seqs,
        enable_chunked_prefill=config.enable_chunked_prefill,
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        policy=config.policy,
        scheduler_reserve_full_isl=config.scheduler_reserve_full_isl,
        num_lookahead_tokens=config.num_lookahead_tokens,
    )
    cls = AsyncScheduler if config.async_scheduling else Scheduler
    return cls(
        sched_config,
        config.kv_cache_config(),
        enable_caching=config.enable_prefix_caching,
        watermark=config.watermark,
        enable_kv_cache_events=config.enable_kv_cache_events,
        speculative_config=config.speculative_config(),
    )
