"""Speculative decoding settings and statistics, as vLLM 0.33.0's scheduler sees them.

Mirrors the scheduler-facing parts of ``SpeculativeConfig``
(``vllm/config/speculative.py``: ``max_num_new_slots_for_drafting``), of
``VllmConfig`` (``vllm/config/vllm.py``: ``num_speculative_tokens``,
``num_lookahead_tokens``, the async-scheduling compatibility check) and
``SpecDecodingStats`` (``vllm/v1/spec_decode/metrics.py``).

Methods kvcore models: ``ngram`` (prompt lookup on the CPU), ``ngram_gpu``,
``draft_model`` (a smaller model proposes the drafts) and ``eagle`` / ``eagle3`` (a
draft head on the target's hidden states, sequential drafting). Each draft token is
a query slot the target model verifies in the next step. Drafters with a forward
pass of their own (draft model, EAGLE) write KV past the scheduled tokens
(``num_lookahead_tokens`` slots); the draft model's autoregressive input keeps one
unsliced token (one more slot of the step's input budget). EAGLE's draft KV at a
block's last position depends on the next token, so with prefix caching each block
hash also covers the token after the block (``num_hash_lookahead_tokens`` = 1: a
block is hashed, and can be a prefix hit, only once that token exists), which makes
vLLM's trailing-block drop unnecessary; EAGLE reads one prefill token ahead, which
never moves a chunk boundary (``_reserve_prefill_lookahead`` acts from two).

Not modelled: MTP (multi-module MTP reads ``k`` prefill tokens ahead and re-prefills
the tail of each chunk), parallel drafting (P-EAGLE, PARD), DFlash/DSpark, suffix
decoding, dynamic ``num_speculative_tokens``, and EAGLE without prefix caching's
lookahead hashes (``disable_lookahead_block_hashes``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

SPEC_METHODS = ("ngram", "ngram_gpu", "draft_model", "eagle", "eagle3")
"""Speculative methods kvcore schedules as vLLM 0.33.0 does."""

EAGLE_METHODS = ("eagle", "eagle3")

UNMODELLED_SPEC_METHODS = ("mtp", "dflash", "dspark", "suffix")


def check_spec_method(method: str) -> None:
    """ValueError naming the allowed methods unless kvcore models ``method`` (a vLLM
    method kvcore leaves out is said to be so)."""
    allowed = ", ".join(SPEC_METHODS)
    if method in UNMODELLED_SPEC_METHODS:
        raise ValueError(f"method {method!r} is not modelled by kvsim; allowed: {allowed}")
    if method not in SPEC_METHODS:
        raise ValueError(f"unknown method {method!r}; allowed: {allowed}")


"""vLLM methods kvcore refuses (with a message saying so) rather than approximates."""


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    """One engine's speculative decoding (vLLM's ``--speculative-config``).

    ``num_speculative_tokens``: draft tokens proposed per request per decode step
    (``k``); a step verifies ``1 + k`` query tokens of each decoding request.
    """

    method: str
    num_speculative_tokens: int

    def __post_init__(self) -> None:
        check_spec_method(self.method)
        k = self.num_speculative_tokens
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"num_speculative_tokens must be an integer >= 1, got {k!r}")

    @property
    def num_lookahead_tokens(self) -> int:
        """KV slots reserved past the scheduled tokens (``VllmConfig.num_lookahead_tokens``):
        a draft model or EAGLE head writes KV for the positions it drafts; n-gram lookup
        writes none."""
        if self.method == "draft_model" or self.method in EAGLE_METHODS:
            return self.num_speculative_tokens
        return 0

    def num_hash_lookahead_tokens(self, enable_prefix_caching: bool) -> int:
        """Tokens after each block that its hash covers (``VllmConfig.
        num_hash_lookahead_tokens``): 1 for EAGLE with prefix caching, else 0."""
        return 1 if self.method in EAGLE_METHODS and enable_prefix_caching else 0

    @property
    def max_num_new_slots_for_drafting(self) -> int:
        """Input-budget slots each scheduled request sets aside for the drafter
        (``SpeculativeConfig.max_num_new_slots_for_drafting``): the draft model's
        autoregressive input keeps one unsliced token; n-gram needs none."""
        return 1 if self.method == "draft_model" else 0

    @property
    def can_skip_drafts(self) -> bool:
        """vLLM's ``Scheduler.can_skip_drafts`` with the V2 model runner (its default):
        only drafters with their own forward pass (lookahead slots) skip a step whose
        drafts nobody can use."""
        return self.num_lookahead_tokens > 0


@dataclass(slots=True)
class SpecDecodingStats:
    """Mirrors ``vllm.v1.spec_decode.metrics.SpecDecodingStats``: one step's drafts.

    A *draft* is one request's scheduled draft tokens in one step; its accepted
    tokens are the leading drafts the target model's sample agreed with."""

    num_spec_tokens: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    num_draft_tokens_per_pos: list[int] = field(default_factory=list)

    @classmethod
    def new(cls, num_spec_tokens: int) -> SpecDecodingStats:
        return cls(
            num_spec_tokens,
            num_accepted_tokens_per_pos=[0] * num_spec_tokens,
            num_draft_tokens_per_pos=[0] * num_spec_tokens,
        )

    def observe_draft(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        """Count one request's draft of ``num_draft_tokens`` with
        ``num_accepted_tokens`` accepted."""
        assert num_accepted_tokens <= self.num_spec_tokens
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted_tokens
        for i in range(num_accepted_tokens):
            self.num_accepted_tokens_per_pos[i] += 1
        for i in range(num_draft_tokens):
            self.num_draft_tokens_per_pos[i] += 1

    def merged(self, other: SpecDecodingStats) -> SpecDecodingStats:
        """The counts of two intervals added (a new object)."""
        return SpecDecodingStats(
            self.num_spec_tokens,
            self.num_drafts + other.num_drafts,
            self.num_draft_tokens + other.num_draft_tokens,
            self.num_accepted_tokens + other.num_accepted_tokens,
            _added(self.num_accepted_tokens_per_pos, other.num_accepted_tokens_per_pos),
            _added(self.num_draft_tokens_per_pos, other.num_draft_tokens_per_pos),
        )


def _added(a: list[int], b: list[int]) -> list[int]:
    return [x + y for x, y in zip(a, b)]
