"""Scheduler settings (the subset of vLLM 0.33.0's ``SchedulerConfig`` kvcore models)."""

from __future__ import annotations

from dataclasses import dataclass

from kvcore.request_queue import SCHEDULING_POLICIES


@dataclass(frozen=True)
class SchedulerConfig:
    """Engine scheduling limits; defaults are vLLM 0.33.0's ``SchedulerConfig`` defaults.

    Token counts are tokens per engine step.
    """

    max_model_len: int
    """Longest sequence (prompt + output tokens) a request may reach."""
    max_num_batched_tokens: int = 2048
    """Token budget of one step (``max_num_scheduled_tokens``)."""
    max_num_seqs: int = 128
    """Most requests running at once."""
    enable_chunked_prefill: bool = True
    """Split prompts across steps; when off, a prompt that exceeds the remaining
    budget waits (head-of-line)."""
    long_prefill_token_threshold: int = 0
    """Cap on tokens per request per step (0: none); ignored with one eligible request."""
    policy: str = "fcfs"
    """``fcfs`` or ``priority`` (lower value first, then earlier arrival)."""
    scheduler_reserve_full_isl: bool = True
    """Admit a waiting request only if its whole current sequence fits in free blocks."""
    num_lookahead_tokens: int = 0
    """Extra KV slots reserved per step for speculative tokens (no drafts are scheduled)."""

    def __post_init__(self) -> None:
        for name in ("max_model_len", "max_num_batched_tokens", "max_num_seqs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.long_prefill_token_threshold < 0:
            raise ValueError(
                "long_prefill_token_threshold must be >= 0, got "
                f"{self.long_prefill_token_threshold}"
            )
        if self.num_lookahead_tokens < 0:
            raise ValueError(f"num_lookahead_tokens must be >= 0, got {self.num_lookahead_tokens}")
        # The cross-checks of vLLM's SchedulerConfig.verify_max_model_len:
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than "
                f"max_model_len ({self.max_model_len}) with chunked prefill disabled; "
                "raise max_num_batched_tokens or enable chunked prefill"
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_num_seqs ({self.max_num_seqs})"
            )
        if self.long_prefill_token_threshold > self.max_model_len:
            raise ValueError(
                f"long_prefill_token_threshold ({self.long_prefill_token_threshold}) must be "
                f"<= max_model_len ({self.max_model_len})"
            )
        if self.policy not in SCHEDULING_POLICIES:
            raise ValueError(
                f"scheduling_policy: unknown policy {self.policy!r}; "
                f"allowed: {', '.join(SCHEDULING_POLICIES)}"
            )
