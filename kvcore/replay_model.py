"""The fake model of a trace replay (:mod:`kvcore.replay`): its sampler (one fixed
token per request whose prefill completes in a step) and, with speculative decoding,
its drafter, both by the rules of :mod:`kvcore.replay_spec` that vLLM's side of a
conformance case follows too.
"""

from __future__ import annotations

from kvcore.batch_queue import SampleFn
from kvcore.replay_spec import num_accepted, num_drafts
from kvcore.sched_output import SchedulerOutput
from kvcore.scheduler import Scheduler


def fake_sampler(token_id: int) -> SampleFn:
    """The replay's model: ``token_id`` for each scheduled request whose prefill
    completes in the step, repeated ``1 + accepted`` times for one that verifies
    drafts (:func:`kvcore.replay_spec.num_accepted`); nothing for a partial chunk."""

    def sample(scheduler: Scheduler, out: SchedulerOutput) -> dict[str, list[int]]:
        requests = scheduler.requests
        spec = out.scheduled_spec_decode_tokens
        sampled = {}
        for rid in out.num_scheduled_tokens:
            req = requests[rid]
            if req.is_prefill_chunk:
                continue
            drafts = spec.get(rid)
            n = 1 + num_accepted(rid, req.num_tokens, len(drafts)) if drafts else 1
            sampled[rid] = [token_id] * n
        return sampled

    return sample


def propose_drafts(scheduler: Scheduler, out: SchedulerOutput, token_id: int) -> None:
    """After a synchronous step that ran: the fake drafter's proposals for its
    requests (:func:`kvcore.replay_spec.num_drafts`), as vLLM's engine core hands the
    model runner's to ``update_draft_token_ids``."""
    if not scheduler.num_spec_tokens or not out.total_num_scheduled_tokens or out.skip_drafts:
        return
    k = scheduler.num_spec_tokens
    drafts = {}
    for rid in out.num_scheduled_tokens:
        req = scheduler.requests.get(rid)
        if req is not None and not req.is_finished():
            drafts[rid] = [token_id] * num_drafts(rid, req.num_tokens, k)
    scheduler.update_draft_token_ids(drafts)
