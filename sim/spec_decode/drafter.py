"""What the drafter adds to an engine step's time (speculative decoding).

The target model's verification needs no model of its own: a decoding request with
``s`` drafts is scheduled ``1 + s`` query tokens, which the latency model's
``step_time`` costs as any other step. The drafter runs after the target's forward
pass, in the same step, on the requests that sampled (vLLM 0.33.0's
``propose_draft_token_ids``):

- ``ngram`` / ``ngram_gpu``: a lookup of the context's last n-gram, no model: no GPU
  forward pass, a small host cost per request (:data:`NGRAM_S_PER_REQUEST`).
- ``draft_model``: the draft model's forward passes, timed by its own latency model
  (the roofline of the draft model on the same GPU and tensor-parallel size): one pass
  over the step's scheduled tokens (the draft model computes its KV for the verified
  tokens and prompt chunks as the target does) that proposes the first draft, then
  ``k - 1`` one-token decode passes over the requests that draft. A step whose
  drafts nobody can use (``SchedulerOutput.skip_drafts``) runs none of them.
- ``eagle`` / ``eagle3``: the same passes of the EAGLE head
  (:func:`calibrate.eagle_head.eagle_head`: one decoder layer of the target's shape
  over its hidden states, with the head's input projection and output vocabulary).

With a constant latency model (``--latency-model constant``: seconds per step, no
model size) the drafter costs nothing: it has no figure for a smaller model.
Units: seconds, tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sim.engine.step_timing import make_decode_timer, make_step_timer

NGRAM_S_PER_REQUEST = 2e-6
"""Host seconds of one request's n-gram lookup (vLLM's numba KMP proposer over a few
thousand tokens: microseconds; an assumption, not measured here)."""


class DrafterCost:
    """The drafter's seconds per step for ``method`` with ``k`` drafts; ``draft_latency``
    the latency model of the drafter's model (a draft model or EAGLE head; None for the
    n-gram methods or a constant latency model: no GPU cost)."""

    def __init__(self, method: str, k: int, draft_latency: Any | None = None) -> None:
        self.method = method
        self.k = k
        self.draft_latency = draft_latency
        # The latency model's pure-Python twins (checked against it when built; None
        # where none exists): a step costs no numpy call.
        self._step_time = None if draft_latency is None else make_step_timer(draft_latency)
        self._decode_time = None if draft_latency is None else make_decode_timer(draft_latency)

    def step_s(
        self,
        new_tokens: Sequence[int],
        contexts: Sequence[int],
        num_drafting: int,
        drafting_context: int,
    ) -> float:
        """Seconds the drafter adds to a step (not skipped) that scheduled ``new_tokens``
        over ``contexts`` (per request, tokens), ``num_drafting`` of whose requests
        sampled and draft, with ``drafting_context`` tokens in their KV after the step's
        tokens (summed)."""
        if self.method.startswith("ngram"):
            return NGRAM_S_PER_REQUEST * num_drafting
        model = self.draft_latency
        if model is None or not new_tokens:
            return 0.0
        if self._step_time is not None:
            first = self._step_time(list(new_tokens), list(contexts))
        else:
            first = float(
                model.step_time(
                    np.asarray(new_tokens, dtype=np.int64), np.asarray(contexts, dtype=np.int64)
                )
            )
        if self.k <= 1 or num_drafting == 0:
            return first
        decode = self._decode_time
        if decode is not None:
            for i in range(self.k - 1):
                first += decode(num_drafting, drafting_context + i * num_drafting)
            return first
        passes = np.arange(self.k - 1, dtype=np.int64)
        batch = np.full(self.k - 1, num_drafting, dtype=np.int64)
        rest = model.decode_step_times(batch, drafting_context + passes * num_drafting)
        return first + float(np.sum(rest))

    def describe(self) -> dict[str, object]:
        """The drafter's cost model as ``config.yaml`` records it."""
        if self.method.startswith("ngram"):
            return {"kind": "n-gram lookup", "host_s_per_request": NGRAM_S_PER_REQUEST}
        if self.draft_latency is None:
            return {"kind": "none (constant latency model)"}
        describe = getattr(self.draft_latency, "describe", None)
        what = "draft model" if self.method == "draft_model" else f"{self.method} head"
        return {
            "kind": f"{what}: 1 pass over the step's tokens + {self.k - 1} decode passes",
            "latency_model": describe() if describe else {},
        }
