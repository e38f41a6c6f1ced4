"""The V1 scheduler in asynchronous mode (vLLM 0.33.0's default engine loop).

Mirrors ``AsyncScheduler`` of ``vllm/v1/core/sched/async_scheduler.py`` (vLLM 0.33.0).
With async scheduling the engine schedules step N+1 while step N still runs on the
GPU, so ``update_from_output`` of step N comes after ``schedule()`` of step N+1. Each
request scheduled to sample a token gets an *output placeholder* at schedule time
(``Request.num_output_placeholders``); the token's output resolves it. The base
:class:`kvcore.scheduler.Scheduler` holds the checks that read placeholders, as
vLLM's base class does: a running request whose step in flight already samples its
last token (``max_tokens``) is not scheduled again; a request preempted with output in
flight keeps that output as *stale* (delivered, stop-checked, counters untouched) and
waits until it is back; output of a running request caches the blocks it fills.

How the engine drives it (vLLM's ``EngineCore.step_with_batch_queue``, one call per
engine iteration, with a batch queue of ``BATCH_QUEUE_SIZE`` = 2 batches):

1. If ``has_requests()``: ``out = schedule()``, start executing ``out`` (the model
   decides now which requests sample: those with ``not is_prefill_chunk``), append it
   to the queue. If the queue now holds fewer than 2 batches and (``out`` scheduled
   any tokens or ``has_requests()``), the iteration ends here, without waiting.
2. Else, if the queue is empty, the iteration ends (idle).
3. Otherwise pop the *oldest* batch, wait until it has executed, and apply its output
   with ``update_from_output(batch_output, sampled_token_ids)``.

New requests are added (``add_request``) between iterations. In steady decoding every
iteration schedules one batch and applies the one before it: a request's token
sampled by step N is appended after step N+1 was scheduled, so step N+1 was planned
with a placeholder in its place. :class:`kvcore.batch_queue.BatchQueue` runs this loop.

Speculative decoding: a decoding request carries ``k`` placeholder drafts into its
next step (the worker fills them; the scheduler only counts them) and gets one
output placeholder per draft scheduled, resolved or rolled back by the step's output.

Left out (vLLM features kvcore does not have): structured output (no deferred
sampling), pipeline parallelism (so the decode stagger ``next_decode_eligible_step``
never holds a request back: with one stage it is the very next step), KV connectors
other than the CPU offload tier's and P/D (NIXL).
"""

from __future__ import annotations

from kvcore.kv_cache_interface import KVCacheConfig
from kvcore.kv_cache_planning import max_concurrent_batches
from kvcore.nixl_connector import NixlConnectorScheduler
from kvcore.offloading_connector import OffloadingConnectorScheduler
from kvcore.sched_output import SchedulerOutput
from kvcore.scheduler import Scheduler
from kvcore.scheduler_config import SchedulerConfig
from kvcore.spec_decode import SpeculativeConfig

BATCH_QUEUE_SIZE = max_concurrent_batches(async_scheduling=True)
"""Batches in flight with async scheduling and one pipeline stage (2): vLLM's
``VllmConfig.max_concurrent_batches``, the size of the engine core's batch queue."""

NUM_SAMPLED_TOKENS_PER_STEP = 1
"""Tokens a step samples for a request whose prefill is complete (vLLM: 1 for
generative models; pooling and diffusion models sample none)."""


class AsyncScheduler(Scheduler):
    """Mirrors vLLM 0.33.0's ``vllm.v1.core.sched.async_scheduler.AsyncScheduler``.

    Same constructor and interface as :class:`kvcore.scheduler.Scheduler`
    (``add_request``, ``schedule``, ``update_from_output``, ``has_requests``...), but
    ``update_from_output`` of a step may come after the next ``schedule()``; the
    caller must follow the batch-queue order of this module's docstring. The KV cache
    manager reserves sliding-window blocks for ``max_concurrent_batches`` batches of
    tokens in flight (vLLM's ``max_in_flight_tokens``).
    """

    def __init__(
        self,
        scheduler_config: SchedulerConfig,
        kv_cache_config: KVCacheConfig,
        enable_caching: bool = True,
        watermark: float = 0.0,
        enable_kv_cache_events: bool = False,
        log_stats: bool = True,
        max_concurrent_batches: int = BATCH_QUEUE_SIZE,
        speculative_config: SpeculativeConfig | None = None,
        use_v2_model_runner: bool = True,
        connector: OffloadingConnectorScheduler | NixlConnectorScheduler | None = None,
    ) -> None:
        """``connector``: the scheduler side of the CPU KV offload tier or of the P/D
        connector, or None."""
        super().__init__(
            scheduler_config,
            kv_cache_config,
            enable_caching=enable_caching,
            watermark=watermark,
            enable_kv_cache_events=enable_kv_cache_events,
            log_stats=log_stats,
            max_concurrent_batches=max_concurrent_batches,
            speculative_config=speculative_config,
            use_v2_model_runner=use_v2_model_runner,
            connector=connector,
        )
        # Placeholder drafts a decoding request carries into its next step, shared and
        # never mutated (vLLM resizes it to each step's ``num_spec_tokens_to_schedule``,
        # which is always ``num_spec_tokens`` without dynamic speculative decoding).
        self._spec_token_placeholders: list[int] = [-1] * self.num_spec_tokens

    def _update_after_schedule(self, out: SchedulerOutput) -> None:
        """Mirrors ``AsyncScheduler._update_after_schedule``: after the base update,
        every request that samples in this step gets one output placeholder, one
        more per draft scheduled for it, and placeholder drafts for its next step."""
        super()._update_after_schedule(out)
        spec_tokens = out.scheduled_spec_decode_tokens
        placeholders = self._spec_token_placeholders
        requests = self.requests
        for rid in out.num_scheduled_tokens:
            request = requests[rid]
            if request.is_prefill_chunk:
                continue
            drafts = spec_tokens.get(rid) if spec_tokens else None
            request.num_output_placeholders += NUM_SAMPLED_TOKENS_PER_STEP + (
                len(drafts) if drafts else 0
            )
            request.spec_token_ids = placeholders
