"""What one scheduled step of a replica costs: its duration, its prefill and decode
token counts, and the tokens the fake model samples in it.

A :class:`StepCoster` belongs to one engine (:class:`sim.engine.replica.ReplicaEngine` builds
it; its loops and the stretch runner, :mod:`sim.engine.stretches`, ask it). A
request scheduled one token whose context is all its known tokens but the last
(``decode_lag``: 1, or 2 with async scheduling, where the tokens in flight count as
known) is a decode; every other scheduled token is prefill. Durations come from the
latency model through its pure-Python twins (:mod:`sim.engine.step_timing`); with
``vector_decode`` a decode-only step takes the decode formula fast-forward uses, so
stepped and fast-forwarded steps are bit-identical. Units: seconds, tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvcore.sched_output import SchedulerOutput
from kvcore.scheduler import Scheduler
from sim.engine.step_timing import make_decode_timer, make_step_timer
from sim.engine.stretches import SAMPLE_TOKEN_ID
from sim.spec_decode.engine import SpecDecodeRun

SAMPLED = (SAMPLE_TOKEN_ID,)
"""One sampled token (read, never mutated, by the scheduler)."""


class StepCoster:
    """The step costs of one replica's engine."""

    def __init__(
        self,
        scheduler: Scheduler,
        latency_model: Any,
        *,
        decode_lag: int,
        vector_decode: bool,
        spec: SpecDecodeRun | None,
    ) -> None:
        """``decode_lag``: 1, or 2 with async scheduling; ``vector_decode``: decode-only
        steps take the decode formula (:attr:`sim.engine.regime.EngineRegime.vector_decode`);
        ``spec``: speculative decoding (its samples, drafts and drafter cost)."""
        self.scheduler = scheduler
        self.latency_model = latency_model
        self.decode_lag = decode_lag
        self.vector_decode = vector_decode
        self.spec = spec
        self.decode_time = make_decode_timer(latency_model) if vector_decode else None
        self.step_time = make_step_timer(latency_model)

    def decode_seconds(self, batch: int, context: int) -> float:
        """Seconds of one decode-only step of ``batch`` requests over ``context`` tokens
        in all (the same value fast-forward computes)."""
        if self.decode_time is not None:
            return self.decode_time(batch, context)
        return float(
            self.latency_model.decode_step_times(
                np.array([batch], dtype=np.int64), np.array([context], dtype=np.int64)
            )[0]
        )

    def cost(
        self, out: SchedulerOutput, batch_sampled: Any = None
    ) -> tuple[float, int, int, dict[str, Any]]:
        """A scheduled step's duration (s), its prefill and decode token counts and
        the tokens it samples (``batch_sampled``: what the batch queue's model already
        sampled; None: sample here)."""
        if self.spec is not None:
            return self._spec_cost(out, self.spec, batch_sampled)
        reqs = self.scheduler.requests
        n_sched = out.num_scheduled_tokens
        prefill = decode = 0
        context_sum = 0
        contexts = []
        sampled: dict[str, tuple[int]] = {}
        lag = self.decode_lag
        for rid, n in n_sched.items():
            req = reqs[rid]
            ctx = req.num_computed_tokens - n
            contexts.append(ctx)
            context_sum += ctx
            if n == 1 and ctx == req.num_tokens + req.num_output_placeholders - lag:
                decode += 1
            else:
                prefill += n
            if not req.is_prefill_chunk:
                sampled[rid] = SAMPLED
        if prefill == 0 and self.vector_decode:
            # Decode-only steps use the vectorized formula, as fast-forward does, so
            # both paths give bit-identical durations.
            duration = self.decode_seconds(decode, context_sum)
        else:
            duration = self.seconds(list(n_sched.values()), contexts)
        return duration, prefill, decode, sampled

    def seconds(self, new_tokens: list[int], contexts: list[int]) -> float:
        """The latency model's seconds for a step of ``new_tokens`` per request over
        ``contexts`` tokens each (its pure-Python twin where it has one)."""
        if self.step_time is not None:
            return self.step_time(new_tokens, contexts)
        return float(
            self.latency_model.step_time(
                np.array(new_tokens, dtype=np.int64), np.array(contexts, dtype=np.int64)
            )
        )

    def _spec_cost(
        self, out: SchedulerOutput, spec: SpecDecodeRun, sampled: Any
    ) -> tuple[float, int, int, dict[str, Any]]:
        """:meth:`cost` with speculative decoding: a decoding request scheduled
        ``1 + s`` tokens (``s`` drafts to verify) is a decode of ``1 + s`` tokens (the
        decode count is of tokens scheduled, as without drafts); the target's step time
        over every request's scheduled tokens (no decode-only shortcut: it assumes one
        token each) plus the drafter's (:meth:`SpecDecodeRun.drafter_step_s`)."""
        reqs = self.scheduler.requests
        if sampled is None:
            sampled = spec.sample(self.scheduler, out)
        drafts = out.scheduled_spec_decode_tokens
        new: list[int] = []
        contexts: list[int] = []
        prefill = decode = decode_reqs = emitted = 0
        drafting = drafting_context = 0
        lag = self.decode_lag
        for rid, n in out.num_scheduled_tokens.items():
            req = reqs[rid]
            ctx = req.num_computed_tokens - n
            new.append(n)
            contexts.append(ctx)
            if rid in drafts or (
                n == 1 and ctx == req.num_tokens + req.num_output_placeholders - lag
            ):
                decode += n
                decode_reqs += 1
                emitted += len(sampled.get(rid, ()))
            else:
                prefill += n
            if rid in sampled:
                drafting += 1
                drafting_context += ctx + n
        duration = self.seconds(new, contexts)
        duration += spec.drafter_step_s(out, new, contexts, drafting, drafting_context)
        spec.note_decodes(decode_reqs, emitted)
        return duration, prefill, decode, sampled
