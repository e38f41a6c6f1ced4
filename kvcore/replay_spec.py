"""The fake drafter and verifier of speculative-decoding replays: one rule for both
sides of a conformance case, kvcore's (:mod:`kvcore.replay`) and vLLM's (the oracle
driver, which loads this file by path: standard library only).

Both draw from a CRC-32 of the request id and its token count at the moment of the
call, so the same scheduler state gives the same drafts and acceptances on both
sides, and a replay is deterministic without an RNG. Token ids do not matter (stop
conditions ignore them): drafts and accepted tokens use the replay's sample token.
"""

from __future__ import annotations

import zlib
from typing import Any


def _draw(request_id: str, num_tokens: int, salt: str, modulus: int) -> int:
    return zlib.crc32(f"{salt}:{request_id}:{num_tokens}".encode()) % modulus


def num_drafts(request_id: str, num_tokens: int, num_speculative_tokens: int) -> int:
    """Drafts proposed for a request of ``num_tokens`` tokens after a step: 0 to k,
    k twice as often as each other count (an n-gram lookup may find no match)."""
    k = num_speculative_tokens
    return min(_draw(request_id, num_tokens, "drafts", k + 2), k)


def num_accepted(request_id: str, num_tokens: int, num_scheduled_drafts: int) -> int:
    """Drafts the target model accepts in a step that verifies
    ``num_scheduled_drafts`` of them (0 to that count, evenly)."""
    return _draw(request_id, num_tokens, "accept", num_scheduled_drafts + 1)


def spec_stats_json(stats: Any) -> dict[str, Any] | None:
    """A step line's ``spec_decoding``: the counters of a ``SpecDecodingStats`` (kvcore's
    or vLLM's, same fields), or None when the step verified no drafts."""
    if stats is None:
        return None
    return {
        "num_drafts": stats.num_drafts,
        "num_draft_tokens": stats.num_draft_tokens,
        "num_accepted_tokens": stats.num_accepted_tokens,
        "num_accepted_tokens_per_pos": list(stats.num_accepted_tokens_per_pos),
    }
