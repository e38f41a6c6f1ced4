"""A workload that replays a trace: request ``i`` is submitted at ``arrival_s[i]``.

Prompt token ids are built when the engine first uses them (a request it rejects for
its length never builds them): the trace's own ids when it has them, re-expanded hash
blocks when it has hash ids, otherwise ids drawn from the stream ``(seed, trace row,
i)``; the same ids whenever they are built. Completions do not change anything (the
trace is open loop), so a helper process may build and hash the prompts ahead
(:meth:`TraceWorkload.draw_ahead`) while the loop only submits them; each row's request
is built by :class:`workloads.trace_rows.TraceRows` (compiled).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import simpy

from workloads.feed import ArrivalFeed, At
from workloads.process import AHEAD_CHUNK, Chunks, DrawnPrompt, Prepare, Workload, draw_prompt
from workloads.tokens import (
    TAG_TRACE_ROW,
    HashBlockTokens,
    KeyedStreams,
    random_tokens,
    token_typecode,
)
from workloads.trace_rows import TraceRows
from workloads.traces.table import TraceTable


class TraceWorkload(Workload):
    """Replays a ``TraceTable`` at its arrival times (seconds)."""

    reacts_to_finish = False  # arrival times are fixed by the trace

    def __init__(
        self,
        table: TraceTable,
        name: str,
        source: str,
        seed: int = 0,
        vocab_size: int = 32000,
        overrides: dict[str, float | int] | None = None,
    ) -> None:
        """``overrides``: what cut the trace (``kvsim run --num-requests/--duration``),
        recorded in the resolved configuration when there are any."""
        spec: dict[str, Any] = {
            "name": name,
            "trace": source,
            "format": table.format,
            "num_requests": len(table),
            "seed": seed,
            "vocab_size": vocab_size,
            "skipped_rows": table.skipped_rows,
        }
        if overrides:
            spec["overrides"] = dict(overrides)
        super().__init__(name, spec, len(table))
        self.table = table
        self._seed = seed
        self._streams = KeyedStreams()
        self._vocab = vocab_size
        self._blocks = HashBlockTokens(seed, vocab_size)
        self._rows_by_id: dict[str, int] | None = None
        self._rows = TraceRows(
            table.prompt_tokens.tolist(),
            table.output_tokens.tolist(),
            table.request_ids,
            table.priority,
            table.lora_id,
            table.cache_salt,
            table.session_id,
            self._tokens,
            # Ids drawn from each row's own stream: no two rows share a block.
            unshared=table.token_ids is None and table.hash_ids is None,
        )

    def draw_ahead(self, prepare: Prepare | None = None) -> Iterator[list[DrawnPrompt]]:
        """Rows 0, 1, ... in chunks, as :meth:`_replay` submits them: each row's prompt
        (:data:`workloads.process.DrawnPrompt`): its length, its token ids after those
        its block hashes cover (an ``array``), and those hashes (``prepare``'s, None
        without it); where ``prepare`` says the request will be rejected (None), no ids
        (its tokens are then never built, as in the loop). Arrival times and everything
        else come from the table, in the loop."""
        return self._drawn_ahead(prepare)

    def _drawn_ahead(self, prepare: Prepare | None) -> Iterator[list[DrawnPrompt]]:
        explicit = self.table.token_ids is not None  # some row has its own ids
        typecode = token_typecode(self._vocab, explicit)
        n, index, size = len(self.table), 0, 64  # a small first chunk: needed at once
        while index < n:
            end = min(index + size, n)
            chunk: list[DrawnPrompt] = []
            for row in range(index, end):
                chunk.append(draw_prompt(self._rows.request(row, 0.0), prepare, typecode))
            yield chunk
            index = end
            size = AHEAD_CHUNK

    def open_feed(self, at: At) -> ArrivalFeed | None:
        """An :class:`workloads.feed.ArrivalFeed` of this replay (before :meth:`start`):
        its process then submits only the requests the engine does not take."""
        if self._started:
            raise RuntimeError(f"workload {self.name!r}: a feed opens before it starts")
        times = self.table.arrival_s.tolist()
        self._feed = ArrivalFeed(times, len(times), self._rows.drawn, at, self._count_taken)
        return self._feed

    def _begin(self, env: simpy.Environment, ahead: Chunks | None) -> None:
        self._rows.ahead = ahead
        if self._feed is not None:
            env.process(self._feed.replay(env, self._emit))
        else:
            env.process(self._replay(env))

    def _replay(self, env: simpy.Environment) -> Generator[simpy.Event, None, None]:
        drawn = self._rows.drawn
        for row, when in enumerate(self.table.arrival_s.tolist()):
            if when > env.now:
                yield env.timeout(when - env.now)
            self._emit(drawn(row, float(env.now)))

    def _tokens(self, row: int) -> list[int]:
        table = self.table
        explicit = table.token_ids[row] if table.token_ids is not None else None
        if explicit is not None:
            return list(explicit)
        length = int(table.prompt_tokens[row])
        hashes = table.hash_ids[row] if table.hash_ids is not None else None
        if hashes is not None:
            assert table.hash_block_size is not None
            return self._blocks.expand(hashes, table.hash_block_size[row], length)
        rng = self._streams.load(self._seed, TAG_TRACE_ROW, row)
        return random_tokens(rng, length, self._vocab)

    def locate(self, request_id: str) -> int | None:
        """The trace line of request ``request_id``, or None."""
        lines = self.table.line_numbers
        if lines is None:
            return None
        ids = self.table.request_ids
        if ids is None:
            head, _, tail = request_id.partition("-")
            row = int(tail) if head == "req" and tail.isdigit() else -1
        else:
            if self._rows_by_id is None:
                self._rows_by_id = {rid: i for i, rid in enumerate(ids)}
            row = self._rows_by_id.get(request_id, -1)
        return lines[row] if 0 <= row < len(lines) else None
