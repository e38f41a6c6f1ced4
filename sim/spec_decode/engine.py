"""One replica's speculative decoding in the engine loop: the fake model's accepted
tokens, the drafter's proposals, its cost and the counts for the summary.

The contract with kvcore's scheduler (vLLM 0.33.0's): ``schedule()`` puts the drafts
to verify in ``SchedulerOutput.scheduled_spec_decode_tokens`` (request id -> draft
token ids, counted in ``num_scheduled_tokens``); the model then samples, for each
request that is not a partial prefill chunk, ``1 + a`` tokens, ``a`` the accepted
drafts (:meth:`SpecDecodeRun.sample`); the synchronous loop then hands the drafter's
next proposals to ``Scheduler.update_draft_token_ids`` (:meth:`SpecDecodeRun.drafts`;
not when ``skip_drafts``), while with async scheduling the scheduler puts ``k``
placeholder drafts on every decoding request itself, so an n-gram lookup that finds
no match shows up as a draft with none accepted. ``update_from_output`` reports each
step's ``SpecDecodingStats`` (:meth:`SpecDecodeRun.observe`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvcore.sched_output import EngineStepOutput, SchedulerOutput
from kvcore.scheduler import Scheduler
from kvcore.spec_decode import SpecDecodingStats
from sim.spec_decode.acceptance import AcceptanceSampler
from sim.spec_decode.drafter import DrafterCost


class SpecDecodeRun:
    """Speculative decoding of one replica: ``method``, ``k`` drafts per step, the
    acceptance draws (``sampler``, the replica's own seeded Generator), the drafter's
    cost and ``token_id`` (what every sampled or drafted token is)."""

    def __init__(
        self,
        method: str,
        k: int,
        sampler: AcceptanceSampler,
        drafter: DrafterCost,
        token_id: int,
        *,
        async_scheduling: bool,
    ) -> None:
        self.method = method
        self.k = k
        self.sampler = sampler
        self.drafter = drafter
        self.token_id = token_id
        self.async_scheduling = async_scheduling
        self.stats = SpecDecodingStats.new(k)
        """The run's drafts so far (the steps' ``spec_decoding_stats`` merged)."""
        self.decode_request_steps = 0
        """Scheduled decodes (one request in one step)."""
        self.decode_tokens = 0
        """Tokens those decodes emitted (``1 + a`` each)."""
        self.drafter_s = 0.0
        """Seconds of drafter time charged to steps."""
        self.num_skipped = 0
        """Steps whose drafter pass was skipped (``skip_drafts``)."""
        self.timeline: list[tuple[float, int, int, int]] = []
        """Per applied step with drafts: (end s, drafts, draft tokens, accepted)."""

    # -- the fake model ------------------------------------------------------------

    def sample(self, scheduler: Scheduler, out: SchedulerOutput) -> dict[str, list[int]]:
        """Tokens each scheduled request samples: none for a partial prefill chunk, else
        ``1 + a`` with ``a`` accepted of its scheduled drafts (with async scheduling an
        n-gram lookup without a match accepts none of the placeholders). A
        ``kvcore.batch_queue.SampleFn``; call right after ``schedule()``."""
        requests = scheduler.requests
        drafts = out.scheduled_spec_decode_tokens
        sampling = [rid for rid in out.num_scheduled_tokens if not requests[rid].is_prefill_chunk]
        with_drafts = [rid for rid in sampling if drafts.get(rid)]
        counts = [len(drafts[rid]) for rid in with_drafts]
        if self.async_scheduling and self.sampler.model.proposal_rate < 1.0:
            matched = self.sampler.proposes(len(with_drafts))
            counts = [s if m else 0 for s, m in zip(counts, matched)]
        accepted = dict(zip(with_drafts, self.sampler.accepted(counts)))
        t = self.token_id
        return {rid: [t] * (1 + accepted.get(rid, 0)) for rid in sampling}

    def drafts(
        self, sampled: Mapping[str, Sequence[int]], finished: Sequence[str]
    ) -> dict[str, list[int]]:
        """The drafter's proposals after a synchronous step (for
        ``update_draft_token_ids``, which copies them): ``k`` drafts for each request
        that sampled and did not finish, or none where an n-gram lookup finds no match."""
        done = set(finished)
        rids = [rid for rid in sampled if rid not in done]
        proposes = self.sampler.proposes(len(rids))
        draft = [self.token_id] * self.k
        return {rid: (draft if p else []) for rid, p in zip(rids, proposes)}

    # -- cost and counts -----------------------------------------------------------

    def drafter_step_s(
        self,
        out: SchedulerOutput,
        new_tokens: Sequence[int],
        contexts: Sequence[int],
        num_drafting: int,
        drafting_context: int,
    ) -> float:
        """The drafter's seconds in a step (0 when ``out.skip_drafts``); see
        :meth:`sim.spec_decode.drafter.DrafterCost.step_s`."""
        if out.skip_drafts:
            self.num_skipped += 1
            return 0.0
        s = self.drafter.step_s(new_tokens, contexts, num_drafting, drafting_context)
        self.drafter_s += s
        return s

    def note_decodes(self, request_steps: int, tokens: int) -> None:
        """Count a step's scheduled decodes and the tokens they emitted."""
        self.decode_request_steps += request_steps
        self.decode_tokens += tokens

    def after_step(
        self,
        scheduler: Scheduler,
        out: SchedulerOutput,
        result: EngineStepOutput,
        sampled: Mapping[str, Sequence[int]],
        now: float,
    ) -> None:
        """After a synchronous step's output, applied at ``now`` (s): count its drafts,
        and hand the drafter's proposals to ``scheduler`` (vLLM's
        ``EngineCore.post_step``), unless the step skipped the drafter."""
        self.observe(result.spec_decoding_stats, now)
        if not out.skip_drafts:
            scheduler.update_draft_token_ids(self.drafts(sampled, result.finished_req_ids))

    def observe(self, stats: SpecDecodingStats | None, end_s: float) -> None:
        """Add one applied step's ``spec_decoding_stats`` (None: no drafts)."""
        if stats is None or stats.num_drafts == 0:
            return
        self.stats = self.stats.merged(stats)
        self.timeline.append(
            (end_s, stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens)
        )
