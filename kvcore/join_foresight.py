"""The prompt tokens that requests admitted after a stretch's first iteration will
compute (:class:`kvcore.stretch_joins.Join` of iteration 2 or later), known before the
stretch is planned: what times the batches that hold their prompts.

A join's prefill is its prompt less its prefix hits, and its hits are those of the
lookup that iteration's ``schedule()`` makes, after the iterations before it registered
and evicted blocks. :class:`JoinForesight` foresees them only where nothing can change
them: the prompt hits nothing now, so no eviction can take a hit away, and no request
of the stretch shares its first block (hash), so no registration before the lookup can
give it one (block hashes are chained: a hit needs the first block's; an unshared
request's unkeyed hashes are shared by none). A request whose
first block is not full yet may still fill it with anything; while one runs or has
joined, nothing is foreseen. Joins of iteration 1 are
:func:`kvcore.stretch_joins.first_prefills`'.

Mirrors nothing in vLLM: a shortcut the stretch's admissions check (the caller
compares each admission's hits with the foreseen ones).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvcore.kv_cache_block import UNKEYED
from kvcore.request import Request
from kvcore.scheduler import Scheduler


class JoinForesight:
    """The prefills of the joins of a stretch's iterations 2 on, asked in admission
    order (:meth:`prefill`)."""

    def __init__(self, sched: Scheduler, first: Sequence[Request]) -> None:
        """``sched``: the scheduler at the top of the stretch's iteration 1, whose
        running requests decode in it; ``first``: the joins of iteration 1."""
        kvm = sched.kv_cache_manager
        self._kvm = kvm
        self._caching = kvm.enable_caching
        # The first block hash of every request of the stretch so far; None when some
        # request has no full block yet (its first block's hash is not known).
        # Unkeyed hashes (unshared requests') are left out: no two requests share one.
        requests = [*sched.running, *first]
        known = all(req.block_hashes for req in requests)
        firsts: set[object] | None = {req.block_hashes[0] for req in requests} if known else None
        if firsts is not None:
            firsts.discard(UNKEYED)
        self._firsts = firsts

    def prefill(self, req: Request) -> int | None:
        """The prompt tokens ``req`` (a join after every join asked before it, of an
        iteration after the first) will compute when admitted: its whole prompt; None
        when its hits could differ from none (then neither it nor a later join is
        foreseen)."""
        if not self._caching:
            return req.num_tokens
        firsts = self._firsts
        if firsts is None or not req.block_hashes or req.block_hashes[0] in firsts:
            self._firsts = None
            return None
        if self._kvm.get_computed_blocks(req)[1]:
            self._firsts = None
            return None
        if req.block_hashes[0] != UNKEYED:
            firsts.add(req.block_hashes[0])
        return req.num_tokens
