"""A trace row's request as a replay submits it (workloads.trace_rows): the columns it
reads, the prompt built on first use, and the prompts a helper drew ahead."""

from __future__ import annotations

from array import array
from typing import Any

from workloads.trace_rows import PLACEHOLDER_TOKEN_ID, TraceRows, prompt_after_hashed


class _Built:
    """A ``tokens`` callback that records which rows it built."""

    def __init__(self) -> None:
        self.rows: list[int] = []

    def __call__(self, row: int) -> list[int]:
        self.rows.append(row)
        return [row] * 3


class _Ahead:
    """Chunks handed out in order, as the helper's reader does."""

    def __init__(self, chunks: list[list[Any]]) -> None:
        self.chunks = list(chunks)

    def next(self) -> Any:
        return self.chunks.pop(0)


def test_a_row_reads_its_columns_and_builds_its_prompt_once_when_used() -> None:
    built = _Built()
    rows = TraceRows([3, 3], [5, 7], ["a", "b"], [0, 2], [None, 4], [None, "s"], ["x", None], built)
    req = rows.request(1, 2.5)
    assert (req.request_id, req.arrival_s, req.max_tokens, req.priority) == ("b", 2.5, 7, 2)
    assert (req.lora_id, req.cache_salt, req.session_id) == (4, "s", None)
    assert req.num_prompt_tokens == 3 and not req.prompt_built and built.rows == []
    assert req.prompt_token_ids == [1, 1, 1] and req.prompt_token_ids == [1, 1, 1]
    assert built.rows == [1]
    bare = TraceRows([2], [1], None, None, None, None, None, built)
    plain = bare.request(0, 0.0, [9, 8], ["h"])
    assert plain.request_id == "req-0" and plain.priority == 0 and plain.lora_id is None
    assert plain.prompt_token_ids == [9, 8] and plain.prompt_block_hashes == ["h"]
    assert built.rows == [1]  # a given prompt is not built


def test_drawn_rows_come_from_the_helpers_chunks_in_order() -> None:
    built = _Built()
    rows = TraceRows([40, 3, 2], [1, 1, 1], None, None, None, None, None, built)
    # Row 0: hashes cover 32 of its 40 tokens; row 1: to be rejected (nothing drawn);
    # row 2, in the next chunk: no hashes, every id.
    rows.ahead = _Ahead(
        [
            [(40, array("I", range(8)), ["h0", "h1"]), (3, None, None)],
            [(2, array("I", [7, 7]), None)],
        ]
    )
    first = rows.drawn(0, 1.0)
    assert first.prompt_token_ids == [PLACEHOLDER_TOKEN_ID] * 32 + list(range(8))
    assert first.prompt_block_hashes == ["h0", "h1"] and first.arrival_s == 1.0
    second = rows.drawn(1, 2.0)
    assert not second.prompt_built and second.num_prompt_tokens == 3
    third = rows.drawn(2, 3.0)
    assert third.prompt_token_ids == [7, 7] and third.prompt_block_hashes is None
    assert built.rows == [] and rows.ahead.chunks == []
    assert second.prompt_token_ids == [1, 1, 1] and built.rows == [1]
    without = TraceRows([3], [1], None, None, None, None, None, built)  # no helper
    assert without.drawn(0, 0.0).prompt_token_ids == [0, 0, 0]


def test_a_prompt_after_hashed_blocks_is_placeholders_then_the_ids_sent() -> None:
    assert prompt_after_hashed(4, array("I", [1, 2, 3, 4])) == [1, 2, 3, 4]
    assert prompt_after_hashed(5, array("I", [1, 2])) == [PLACEHOLDER_TOKEN_ID] * 3 + [1, 2]
    assert prompt_after_hashed(2, array("I")) == [PLACEHOLDER_TOKEN_ID] * 2
