"""Requests as the scheduler and KV cache manager see them.

Mirrors ``Request`` and ``RequestStatus`` of ``vllm/v1/request.py`` (vLLM 0.33.0),
keeping only what scheduling and KV caching observe. There is no clock: the
``arrival_time`` is a plain number handed in by the caller.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kvcore.kv_cache_block import BlockHash


class RequestStatus(enum.IntEnum):
    """Lifecycle states (same order as vLLM: every status after PREEMPTED is final)."""

    WAITING = enum.auto()
    WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR = enum.auto()
    WAITING_FOR_REMOTE_KVS = enum.auto()
    WAITING_FOR_STREAMING_REQ = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH_CAPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()
    FINISHED_IGNORED = enum.auto()
    FINISHED_ERROR = enum.auto()
    FINISHED_REPETITION = enum.auto()

    @staticmethod
    def is_finished(status: RequestStatus) -> bool:
        return status > RequestStatus.PREEMPTED


_PREEMPTED = int(RequestStatus.PREEMPTED)  # statuses above it are final


@dataclass(frozen=True)
class LoRARequest:
    """Mirrors the hashed fields of ``vllm.lora.request.LoRARequest``.

    The LoRA adapter of a request; its name and path enter every block hash."""

    lora_name: str
    lora_int_id: int
    lora_path: str = ""

    @classmethod
    def from_id(cls, lora_id: int) -> LoRARequest:
        """The adapter kvsim uses for an integer ``lora_id`` in traces."""
        return cls(lora_name=f"lora{lora_id}", lora_int_id=lora_id, lora_path=f"/lora/{lora_id}")


class Request:
    """One generation request (mirrors vLLM's ``Request``).

    ``block_hasher`` (a :class:`kvcore.block_hashing.BlockHasher`) hashes every full
    block of prompt + output tokens eagerly, at construction and on every append.
    ``mm_features`` are ``(identifier, offset, length)`` triples of multimodal items.
    """

    __slots__ = (
        "request_id",
        "priority",
        "arrival_time",
        "max_tokens",
        "lora_request",
        "cache_salt",
        "mm_features",
        "status",
        "prompt_token_ids",
        "num_prompt_tokens",
        "_all_token_ids",
        "_output_token_ids",
        "num_computed_tokens",
        "num_in_flight_tokens",
        "num_output_placeholders",
        "num_stale_output_tokens",
        "spec_token_ids",
        "is_prefill_chunk",
        "num_preemptions",
        "block_hashes",
        "_block_hasher",
        "_hash_block_size",
        "skip_reading_prefix_cache",
        "eos_token_id",
        "stop_token_ids",
        "stop_reason",
        "num_cached_tokens",
        "kv_transfer_params",
        "num_prefill_cached_tokens",
        "drop_stale_output",
        "last_sched_seq",
        "unshared",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: Sequence[int],
        max_tokens: int,
        arrival_time: float = 0.0,
        priority: int = 0,
        lora_request: LoRARequest | None = None,
        cache_salt: str | None = None,
        mm_features: Sequence[tuple[str, int, int]] | None = None,
        block_hasher: Callable[[Request], list[BlockHash]] | None = None,
        skip_reading_prefix_cache: bool = False,
        eos_token_id: int | None = None,
        stop_token_ids: Sequence[int] = (),
        block_hashes: Sequence[BlockHash] = (),
        kv_transfer_params: dict[str, Any] | None = None,
        unshared: bool = False,
    ) -> None:
        """``block_hashes``: hashes of leading full blocks already computed by this same
        ``block_hasher`` (a kvsim extension: the simulator hashes prompts ahead, in a
        helper process); hashing continues after them, and nothing but KV events (off
        in the simulator) reads the ids of the tokens they cover (the simulator passes
        placeholders there).

        ``kv_transfer_params``: what a P/D connector reads and writes for the request
        (vLLM's ``Request.kv_transfer_params``, from the sampling parameters' extra
        arguments): ``do_remote_decode`` on a prefill instance; ``do_remote_prefill``
        with the prefill side's ``remote_block_ids`` and coordinates on a decode
        instance. The connector updates this dict in place, as vLLM's does.

        ``unshared`` (a kvsim extension; vLLM has no such flag): no other request's
        prompt shares a block with this one (its token ids were drawn for it alone), so
        no other request can hit its blocks in the prefix cache, and it can hit them
        only after a preemption. The block pool then keeps them out of its hash map
        until the request is preempted (:meth:`kvcore.block_pool.BlockPool.cache_full_blocks`),
        with the same counts, evictions and hits as vLLM; where the scheduler allows it,
        its blocks are not even hashed (:class:`kvcore.block_hashing.UnkeyedHasher`)."""
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens} (request {request_id})")
        if len(prompt_token_ids) == 0:
            raise ValueError(f"prompt_token_ids must not be empty (request {request_id})")
        self.request_id = request_id
        self.priority = priority
        self.arrival_time = arrival_time
        self.max_tokens = max_tokens
        self.lora_request = lora_request
        self.cache_salt = cache_salt
        self.mm_features = list(mm_features or ())
        self.status = RequestStatus.WAITING
        # vLLM keeps the caller's list (not a copy) and copies it into the token ids.
        prompt = prompt_token_ids if isinstance(prompt_token_ids, list) else list(prompt_token_ids)
        self.prompt_token_ids = prompt
        self.num_prompt_tokens = len(prompt)
        self._all_token_ids = prompt.copy()
        self._output_token_ids: list[int] = []
        self.num_computed_tokens = 0
        self.num_in_flight_tokens = 0
        # Async scheduling: tokens that scheduled decode steps will sample but whose
        # output has not come back yet (already counted in num_computed_tokens).
        self.num_output_placeholders = 0
        # Async scheduling: the part of num_in_flight_tokens scheduled before the last
        # preemption; its output is still delivered (tokens appended, stop checked)
        # but does not touch the counters the preemption reset.
        self.num_stale_output_tokens = 0
        self.spec_token_ids: list[int] = []
        self.is_prefill_chunk = False
        self.num_preemptions = 0
        self.num_cached_tokens = -1
        self.kv_transfer_params = kv_transfer_params
        # Tokens cached (local + external) at the first admission before any
        # preemption: vLLM's PrefillStats.num_cached_tokens (read by P/D connectors).
        self.num_prefill_cached_tokens = 0
        # Async scheduling with a KV-producing connector: output in flight at a
        # preemption is dropped instead of delivered (vLLM's drop_stale_output).
        self.drop_stale_output = False
        # Deferred block frees (async, KV-consuming connector): the last step
        # sequence number this request was scheduled in (vLLM's last_sched_seq).
        self.last_sched_seq = 0
        self.unshared = unshared
        self.skip_reading_prefix_cache = skip_reading_prefix_cache
        self.eos_token_id = eos_token_id
        self.stop_token_ids = tuple(stop_token_ids)
        self.stop_reason: int | None = None
        self.block_hashes: list[BlockHash] = list(block_hashes)
        self._block_hasher = block_hasher
        # Tokens per hashed block, when the hasher says (skips calls that cannot hash).
        self._hash_block_size = getattr(block_hasher, "hash_block_size", 1)
        self.update_block_hashes()

    @property
    def hash_lookahead_tokens(self) -> int | None:
        """Tokens after each block that this request's block hashes cover (its
        hasher's ``num_lookahead_tokens``); None without a hasher."""
        if self._block_hasher is None:
            return None
        return int(getattr(self._block_hasher, "num_lookahead_tokens", 0))

    @property
    def all_token_ids(self) -> list[int]:
        """Prompt followed by output tokens (do not mutate)."""
        return self._all_token_ids

    @property
    def output_token_ids(self) -> list[int]:
        return self._output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)

    @property
    def num_tokens_with_spec(self) -> int:
        return len(self._all_token_ids) + len(self.spec_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self._output_token_ids)

    def append_output_token_ids(self, token_ids: int | Sequence[int]) -> None:
        """Append sampled tokens and hash any block they complete."""
        if isinstance(token_ids, int):
            self.append_output_token_id(token_ids)
            return
        self._output_token_ids.extend(token_ids)
        self._all_token_ids.extend(token_ids)
        self.update_block_hashes()

    def append_output_token_id(self, token_id: int) -> None:
        """``append_output_token_ids`` for one token (the per-step hot path)."""
        self._output_token_ids.append(token_id)
        all_ids = self._all_token_ids
        all_ids.append(token_id)
        if self._block_hasher is not None and (
            (len(self.block_hashes) + 1) * self._hash_block_size <= len(all_ids)
        ):
            self.block_hashes.extend(self._block_hasher(self))

    def update_block_hashes(self) -> None:
        """Hash the full blocks not hashed yet."""
        hasher = self._block_hasher
        if hasher is not None and (
            (len(self.block_hashes) + 1) * self._hash_block_size <= len(self._all_token_ids)
        ):
            self.block_hashes.extend(hasher(self))

    def is_finished(self) -> bool:
        return self.status > _PREEMPTED

    def __hash__(self) -> int:
        """Identity, as any object's (stated because a compiled class that defines
        ``__lt__`` would otherwise be unhashable; requests go in sets)."""
        return object.__hash__(self)

    def __lt__(self, other: Request) -> bool:
        """Priority-queue order: priority, then arrival time, then request id."""
        if self.priority != other.priority:
            return self.priority < other.priority
        if self.arrival_time != other.arrival_time:
            return self.arrival_time < other.arrival_time
        if self.request_id != other.request_id:
            return self.request_id < other.request_id
        return id(self) < id(other)

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, status={self.status.name}, "
            f"tokens={self.num_tokens}, computed={self.num_computed_tokens})"
        )


def check_stop(request: Request, max_model_len: int) -> bool:
    """Set a final status if the last token stops the request (``sched/utils.check_stop``).

    Order as vLLM: EOS, stop token ids, then max_model_len / max_tokens.
    """
    last = request._output_token_ids[-1]
    if request.eos_token_id is not None and last == request.eos_token_id:
        request.status = RequestStatus.FINISHED_STOPPED
        return True
    if last in request.stop_token_ids:
        request.status = RequestStatus.FINISHED_STOPPED
        request.stop_reason = last
        return True
    if (
        len(request._all_token_ids) >= max_model_len
        or len(request._output_token_ids) >= request.max_tokens
    ):
        request.status = RequestStatus.FINISHED_LENGTH_CAPPED
        return True
    return False
