"""The request a workload hands to the simulated engine at its arrival time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class SimRequest:
    """One request, built when it arrives (its token ids exist only while it lives).

    Attributes:
        request_id: unique within the workload.
        arrival_s: arrival time in simulated seconds (``env.now`` when submitted).
        prompt_token_ids: the prompt, token ids in ``[0, vocab_size)``.
        max_tokens: output tokens to generate; the simulated engine ignores EOS,
            so a request always produces exactly this many tokens.
        priority: lower is served first under ``scheduling_policy=priority`` (vLLM).
        lora_id: LoRA adapter id, or None for the base model.
        cache_salt: prefix-cache salt (vLLM ``cache_salt``), or None.
        session_id: the multi-turn session this request belongs to, or None.
        prompt_block_hashes: the prompt's full-block hashes when the engine's block
            hasher computed them ahead (a helper drawing the workload), else None.
    """

    request_id: str
    arrival_s: float
    prompt_token_ids: list[int]
    max_tokens: int
    priority: int = 0
    lora_id: int | None = None
    cache_salt: str | None = None
    session_id: str | None = None
    prompt_block_hashes: list[Any] | None = None

    @property
    def num_prompt_tokens(self) -> int:
        """Prompt length in tokens."""
        return len(self.prompt_token_ids)
