"""A fixed prompt pool (``prompt_pool``): prompts drawn once, then sent in an order.

Pool prompt ``i`` of a ``size`` pool is what single-turn session ``i`` of the same
spec would send (its stream ``(seed, session, i)``: shared prefix, priority, lengths,
token ids). In a ``groups`` pool, prompt ``g * num_prompts_per_group + j`` is group
``g``'s system prompt (the stream ``(seed, prefix, g)``, as ``shared_prefix`` groups
draw theirs) followed by question ``j`` of that group (the stream ``(seed, pool, g,
j)``). The order of sends comes from its own stream ``(seed, pool order)``.
"""

from __future__ import annotations

import numpy as np

from workloads.sessions import SessionPlanner
from workloads.spec_bench import PromptPool
from workloads.tokens import TAG_POOL, TAG_POOL_ORDER, TAG_PREFIX, random_tokens, stream

PoolPrompt = tuple[tuple[int, ...], int, int]
"""One pool prompt: token ids, ``max_tokens`` and priority."""


def draw_pool(
    pool: PromptPool, planner: SessionPlanner, seed: int, vocab_size: int
) -> list[PoolPrompt]:
    """The pool's prompts, in pool order (see the module docstring)."""
    groups = pool.groups
    if groups is None:
        out = []
        for i in range(pool.num_prompts):
            req = planner.next_request(planner.plan(i, 1, None), "", 0.0)
            out.append((tuple(req.prompt_token_ids), req.max_tokens, req.priority))
        return out
    prompts = []
    for g in range(groups.num_groups):
        system = random_tokens(stream(seed, TAG_PREFIX, g), groups.system_prompt_len, vocab_size)
        for j in range(groups.num_prompts_per_group):
            question = random_tokens(stream(seed, TAG_POOL, g, j), groups.question_len, vocab_size)
            prompts.append((tuple(system + question), groups.output_len, 0))
    return prompts


class PoolOrder:
    """Which pool prompt the ``k``-th send takes (``k`` = 0, 1, ... in order)."""

    def __init__(self, order: str, size: int, seed: int) -> None:
        self._order = order
        self._size = size
        self._rng = stream(seed, TAG_POOL_ORDER)
        self._cycle: np.ndarray | None = None
        self._sent = 0

    def next(self) -> int:
        """The index of the next prompt to send."""
        k, self._sent = self._sent, self._sent + 1
        if self._order == "random":
            return int(self._rng.integers(self._size))
        pos = k % self._size
        if self._order == "fixed":
            return pos
        if pos == 0:  # a new cycle: a fresh permutation
            self._cycle = self._rng.permutation(self._size)
        assert self._cycle is not None
        return int(self._cycle[pos])
