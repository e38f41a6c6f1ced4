"""The request a workload hands to the simulated engine at its arrival time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

_FIELDS = (
    "request_id",
    "arrival_s",
    "prompt_token_ids",
    "max_tokens",
    "priority",
    "lora_id",
    "cache_salt",
    "session_id",
    "prompt_block_hashes",
    "timeout_s",
)


class SimRequest:
    """One request, built when it arrives (its token ids exist only while it lives).

    Attributes:
        request_id: unique within the workload.
        arrival_s: arrival time in simulated seconds (``env.now`` when submitted).
        prompt_token_ids: the prompt, token ids in ``[0, vocab_size)``. A workload may
            give ``num_prompt_tokens`` and ``build_prompt`` instead: the ids are then
            built on first use, so a request the engine rejects for its length (see
            ``num_prompt_tokens``) never builds them.
        num_prompt_tokens: prompt length in tokens, known without the token ids.
        max_tokens: output tokens to generate; the simulated engine ignores EOS,
            so a request produces this many tokens, or fewer when the prompt and
            output reach ``max_model_len`` (vLLM's cap).
        priority: lower is served first under ``scheduling_policy=priority`` (vLLM).
        lora_id: LoRA adapter id, or None for the base model.
        cache_salt: prefix-cache salt (vLLM ``cache_salt``), or None.
        session_id: the multi-turn session this request belongs to, or None.
        prompt_block_hashes: the prompt's full-block hashes when the engine's block
            hasher computed them ahead (a helper drawing the workload), else None. The
            ids of the tokens they cover are then placeholders
            (:data:`workloads.trace_rows.PLACEHOLDER_TOKEN_ID`): the engine hashes on after
            those blocks and reads none of their ids, so they do not travel back.
        timeout_s: seconds after ``arrival_s`` at which the client gives up: a request
            not finished by then is aborted (vLLM's abort on a client disconnect);
            None: never.
        unshared: no other request's prompt shares a block with this one (its ids are
            drawn for it alone, from its own stream): the engine may then keep its
            blocks out of the prefix cache's hash map until it is preempted
            (:attr:`kvcore.request.Request.unshared`) and leave their content unhashed
            (``kvcore.block_hashing.UnkeyedHasher``), with the same results.
    """

    FIELDS: ClassVar[tuple[str, ...]] = _FIELDS
    """The request's public attributes (equality compares them)."""

    __slots__ = (
        "_build",
        "_prompt",
        "arrival_s",
        "cache_salt",
        "lora_id",
        "max_tokens",
        "num_prompt_tokens",
        "priority",
        "prompt_block_hashes",
        "request_id",
        "session_id",
        "timeout_s",
        "unshared",
    )

    def __init__(
        self,
        request_id: str,
        arrival_s: float,
        prompt_token_ids: list[int] | None,
        max_tokens: int,
        priority: int = 0,
        lora_id: int | None = None,
        cache_salt: str | None = None,
        session_id: str | None = None,
        prompt_block_hashes: list[Any] | None = None,
        *,
        num_prompt_tokens: int | None = None,
        build_prompt: Callable[[], list[int]] | None = None,
        timeout_s: float | None = None,
        unshared: bool = False,
    ) -> None:
        if prompt_token_ids is None:
            if num_prompt_tokens is None or build_prompt is None:
                raise ValueError("give prompt_token_ids, or num_prompt_tokens and build_prompt")
        else:
            num_prompt_tokens = len(prompt_token_ids)
        self.request_id = request_id
        self.arrival_s = arrival_s
        self._prompt = prompt_token_ids
        self._build = build_prompt
        self.num_prompt_tokens: int = num_prompt_tokens
        self.max_tokens = max_tokens
        self.priority = priority
        self.lora_id = lora_id
        self.cache_salt = cache_salt
        self.session_id = session_id
        self.prompt_block_hashes = prompt_block_hashes
        self.timeout_s = timeout_s
        self.unshared = unshared

    @property
    def prompt_token_ids(self) -> list[int]:
        """The prompt's token ids (built now if the workload deferred them)."""
        prompt = self._prompt
        if prompt is None:
            assert self._build is not None
            prompt = self._prompt = self._build()
            self._build = None
        return prompt

    @property
    def prompt_built(self) -> bool:
        """Whether the token ids exist (given, or built by a use)."""
        return self._prompt is not None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SimRequest):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in _FIELDS)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it was

    def __repr__(self) -> str:
        prompt = f"<{self.num_prompt_tokens} tokens>"
        return (
            f"SimRequest(request_id={self.request_id!r}, arrival_s={self.arrival_s!r}, "
            f"prompt={prompt}, max_tokens={self.max_tokens!r}, priority={self.priority!r})"
        )
