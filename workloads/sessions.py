"""Session plans: what one session (one request, or the turns of a multi-turn
conversation) will send, drawn from the session's own random stream.

A plan holds only lengths, the prefix group and the priority; token ids are drawn
turn by turn when each turn is sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workloads.distributions import LengthSampler
from workloads.request import SimRequest
from workloads.spec import WorkloadSpec
from workloads.tokens import TAG_PREFIX, TAG_SESSION, KeyedStreams, random_tokens


@dataclass(slots=True)
class SessionPlan:
    """One session: ``len(new_lens)`` turns.

    Attributes:
        index: session number within the workload (0, 1, ...).
        group: shared-prefix group, or None.
        priority: priority of every turn.
        new_lens: new user tokens of each turn (the first turn's follow the prefix).
        out_lens: output tokens (``max_tokens``) of each turn.
        client: the closed-loop client that runs it, or None in open loop.
        rng_state: where the session's stream stands (``KeyedStreams.save``); it draws
            the token ids of each turn in order.
        next_turn: the turn to send next.
        context: token ids every later turn starts with (previous prompt + output).
    """

    index: int
    group: int | None
    priority: int
    new_lens: list[int]
    out_lens: list[int]
    client: int | None
    rng_state: dict[str, Any]
    next_turn: int = 0
    context: list[int] = field(default_factory=list)

    @property
    def num_turns(self) -> int:
        return len(self.new_lens)

    def has_more(self) -> bool:
        """Whether a turn is still to be sent."""
        return self.next_turn < len(self.new_lens)

    def stop(self) -> None:
        """Send no later turn (the client gave up on this one)."""
        del self.new_lens[self.next_turn :]
        del self.out_lens[self.next_turn :]


def _fit(new: list[int], out: list[int], prefix: int, limit: int) -> int:
    """How many leading turns fit in ``limit`` tokens (prompt + output), at least 1."""
    used = prefix
    for turn, (n, o) in enumerate(zip(new, out)):
        if used + n + o > limit:
            return max(turn, 1)
        used += n + o
    return len(new)


class SessionPlanner:
    """Draws session plans for a spec; plan ``i`` depends only on the seed and ``i``."""

    def __init__(
        self,
        spec: WorkloadSpec,
        seed: int,
        prompt: LengthSampler,
        output: LengthSampler,
        turns: LengthSampler | None,
    ) -> None:
        self._spec = spec
        self._seed = seed
        self._prompt = prompt
        self._output = output
        self._turns = turns
        self._streams = KeyedStreams()
        prefix = spec.shared_prefix
        self._prefix_len = prefix.prefix_len if prefix else 0
        self._fraction = prefix.fraction if prefix else 0.0
        self._group_cdf = np.cumsum(prefix.probabilities()) if prefix else None
        prio = spec.priority
        self._prio_values = prio.values if prio else [0]
        weights = np.asarray(
            prio.weights if prio and prio.weights else [1.0] * len(self._prio_values)
        )
        self._prio_cdf = np.cumsum(weights / weights.sum())

    def plan(self, index: int, max_turns: int | None, client: int | None) -> SessionPlan:
        """The plan of session ``index``, cut to ``max_turns`` turns (None: no cap)."""
        rng = self._streams.load(self._seed, TAG_SESSION, index)
        group = None
        if self._group_cdf is not None and rng.random() < self._fraction:
            pick = int(np.searchsorted(self._group_cdf, rng.random(), side="right"))
            group = min(pick, len(self._group_cdf) - 1)
        if len(self._prio_values) == 1:
            priority = self._prio_values[0]  # nothing to draw
        else:
            pick = int(np.searchsorted(self._prio_cdf, rng.random(), side="right"))
            priority = self._prio_values[min(pick, len(self._prio_values) - 1)]
        turns = self._turns.draw(rng) if self._turns is not None else 1
        if max_turns is not None:
            turns = min(turns, max_turns)
        new = self._prompt.draw_many(rng, turns).tolist()
        out = self._output.draw_many(rng, turns).tolist()
        prefix = self._prefix_len if group is not None else 0
        limit = self._spec.max_model_len
        if limit is not None:
            keep = _fit(new, out, prefix, limit)
            new, out = new[:keep], out[:keep]
            out[0] = min(out[0], limit - prefix - 1)
            new[0] = min(new[0], limit - prefix - out[0])
        return SessionPlan(index, group, priority, new, out, client, self._streams.save())

    def _single_turn_tokens(
        self, group: int | None, rng_state: dict[str, Any], n: int
    ) -> list[int]:
        """The prompt of a one-turn session: its group's prefix, then ``n`` ids from the
        session's stream at ``rng_state`` (what :meth:`next_request` draws for turn 0)."""
        head = (
            random_tokens(
                self._streams.load(self._seed, TAG_PREFIX, group),
                self._prefix_len,
                self._spec.vocab_size,
            )
            if group is not None
            else []
        )
        return head + random_tokens(self._streams.restore(rng_state), n, self._spec.vocab_size)

    def next_request(self, plan: SessionPlan, request_id: str, now: float) -> SimRequest:
        """Build the next turn of ``plan`` and advance the plan.

        A one-turn session's token ids are drawn when first used (the same ids: its
        stream is parked in the plan), so a prompt the engine rejects for its length
        is never drawn; a later turn's are drawn now (the next turn continues the
        stream and the context). A one-turn session without a shared prefix is
        unshared (``SimRequest.unshared``): its ids are its own stream's alone, and no
        later turn repeats them."""
        turn = plan.next_turn
        if turn == 0 and len(plan.new_lens) == 1:
            group, state, n = plan.group, plan.rng_state, plan.new_lens[0]
            plan.next_turn = 1
            return SimRequest(
                request_id=request_id,
                arrival_s=now,
                prompt_token_ids=None,
                num_prompt_tokens=(self._prefix_len if group is not None else 0) + n,
                build_prompt=lambda: self._single_turn_tokens(group, state, n),
                max_tokens=plan.out_lens[0],
                priority=plan.priority,
                session_id=f"session-{plan.index}" if self._turns is not None else None,
                unshared=group is None,
            )
        if turn == 0:
            head = (
                random_tokens(
                    self._streams.load(self._seed, TAG_PREFIX, plan.group),
                    self._prefix_len,
                    self._spec.vocab_size,
                )  # prefix_tokens(seed, group, ...), on the shared generator
                if plan.group is not None
                else []
            )
        else:
            head = plan.context
        rng = self._streams.restore(plan.rng_state)
        tokens = head + random_tokens(rng, plan.new_lens[turn], self._spec.vocab_size)
        if turn + 1 < len(plan.new_lens):
            plan.rng_state = self._streams.save()
        plan.context = tokens
        plan.next_turn = turn + 1
        return SimRequest(
            request_id=request_id,
            arrival_s=now,
            prompt_token_ids=tokens,
            max_tokens=plan.out_lens[turn],
            priority=plan.priority,
            session_id=f"session-{plan.index}" if self._turns is not None else None,
        )
