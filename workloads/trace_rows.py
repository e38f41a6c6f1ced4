"""The request of each trace row as a replay submits it (:class:`TraceRows`): one per
arrival, on the simulation's critical path, so the module is compiled with the
engine's (``kvsim_native``) and holds the table's columns as Python lists.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from workloads.request import SimRequest

if TYPE_CHECKING:
    from workloads.process import Chunks

PLACEHOLDER_TOKEN_ID = 0
"""The id a prompt drawn ahead holds where its block hashes came with it: the engine
hashes on after those blocks and reads no id they cover."""


def prompt_after_hashed(num_tokens: int, tail: array[int]) -> list[int]:
    """A prompt of ``num_tokens`` tokens ending with ``tail`` (the ids a helper sent,
    :func:`workloads.process.draw_prompt`), :data:`PLACEHOLDER_TOKEN_ID` before it:
    where the block hashes that came with it cover the prompt (the engine never reads
    those ids). No int object is made per placeholder."""
    head = num_tokens - len(tail)
    if not head:
        return tail.tolist()
    prompt = [PLACEHOLDER_TOKEN_ID] * head
    prompt += tail.tolist()  # in place: one list of the prompt's length fewer
    return prompt


class TraceRows:
    """A trace's per-row request fields and the :class:`SimRequest` of a row."""

    def __init__(
        self,
        prompt_tokens: list[int],
        output_tokens: list[int],
        request_ids: list[str] | None,
        priority: list[int] | None,
        lora_id: list[int | None] | None,
        cache_salt: list[str | None] | None,
        session_id: list[str | None] | None,
        tokens: Callable[[int], list[int]],
        unshared: bool = False,
    ) -> None:
        """The columns of :class:`workloads.traces.table.TraceTable` (None: the trace
        has no such column); ``tokens(row)``: row ``row``'s prompt token ids, built
        when first used; ``unshared``: every row's ids are drawn for it alone (its
        requests say so: ``SimRequest.unshared``)."""
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.request_ids = request_ids
        self.priority = priority
        self.lora_id = lora_id
        self.cache_salt = cache_salt
        self.session_id = session_id
        self.tokens = tokens
        self.unshared = unshared
        self.ahead: Chunks | None = None
        """The helper's chunks of drawn prompts (:meth:`drawn`), once the replay starts."""
        self._chunk: list[Any] = []
        self._pos = 0  # the next row's place in _chunk

    def request(
        self,
        row: int,
        now: float,
        prompt_token_ids: list[int] | None = None,
        prompt_block_hashes: list[Any] | None = None,
    ) -> SimRequest:
        """The request of row ``row``, arriving at ``now`` seconds (its prompt built
        when first used, unless given with its block hashes)."""
        ids, priority, lora = self.request_ids, self.priority, self.lora_id
        salt, session = self.cache_salt, self.session_id
        given = prompt_token_ids is not None
        return SimRequest(
            ids[row] if ids is not None else f"req-{row}",
            now,
            prompt_token_ids,
            self.output_tokens[row],
            priority[row] if priority is not None else 0,
            lora[row] if lora is not None else None,
            salt[row] if salt is not None else None,
            session[row] if session is not None else None,
            prompt_block_hashes,
            num_prompt_tokens=None if given else self.prompt_tokens[row],
            build_prompt=None if given else partial(self.tokens, row),
            unshared=self.unshared,
        )

    def drawn(self, row: int, now: float) -> SimRequest:
        """Row ``row``'s request arriving at ``now`` (s), its prompt drawn and hashed by
        the helper when there is one (its chunks read in order: rows come in order):
        :data:`PLACEHOLDER_TOKEN_ID` where the hashes cover the prompt, then the ids the
        helper sent."""
        ahead = self.ahead
        if ahead is not None:
            if self._pos == len(self._chunk):
                self._chunk, self._pos = ahead.next(), 0
            num_tokens, tail, hashes = self._chunk[self._pos]
            self._pos += 1
            if tail is not None:
                return self.request(row, now, prompt_after_hashed(num_tokens, tail), hashes)
        return self.request(row, now)  # its prompt built when first used
