"""Speculative decoding of a run, resolved: checks against the resolved engine, the
drafter's latency model, each replica's :class:`sim.spec_decode.engine.SpecDecodeRun`, and
``summary.json``'s ``spec_decode`` block.

Fast-forward (``kvcore.fast_forward*``) does not cover speculative decoding: a run
with it steps every step (:data:`FAST_FORWARD_OFF`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibrate.budget import draft_model_of
from calibrate.latency import make_latency_model
from calibrate.roofline import RooflineLatencyModel
from kvcore.spec_decode import SpecDecodingStats, SpeculativeConfig
from sim.engine.stretches import SAMPLE_TOKEN_ID
from sim.spec_decode.acceptance import AcceptanceModel, AcceptanceSampler
from sim.spec_decode.config import FLAG, SpeculativeSettings, check_speculative
from sim.spec_decode.drafter import DrafterCost
from sim.spec_decode.engine import SpecDecodeRun

FAST_FORWARD_OFF = "off: speculative decoding (every step is stepped)"
"""What ``config.yaml`` records for fast-forward when speculative decoding is on."""


@dataclass(frozen=True)
class SpecSetup:
    """A run's speculative decoding: the settings, the scheduler's view, the
    acceptance model and the drafter's cost model."""

    settings: SpeculativeSettings
    config: SpeculativeConfig
    acceptance: AcceptanceModel
    drafter: DrafterCost

    def make_run(self, replica_id: int, seed: int | None, async_scheduling: bool) -> SpecDecodeRun:
        """Replica ``replica_id``'s speculative decoding, its draws seeded from the
        run's ``seed``."""
        return SpecDecodeRun(
            self.config.method,
            self.config.num_speculative_tokens,
            AcceptanceSampler.seeded(self.acceptance, seed, replica_id),
            self.drafter,
            SAMPLE_TOKEN_ID,
            async_scheduling=async_scheduling,
        )

    def describe(self) -> dict[str, Any]:
        """The ``speculative_decoding`` entry of ``config.yaml``."""
        return {
            "method": self.config.method,
            "num_speculative_tokens": self.config.num_speculative_tokens,
            **({"model": self.settings.model} if self.settings.model else {}),
            "num_lookahead_tokens": self.config.num_lookahead_tokens,
            **self.acceptance.describe(),
            "drafter": self.drafter.describe(),
        }


def resolve_spec(
    engine: Any,
    *,
    target: Any = None,
    max_model_len: int,
    max_num_batched_tokens: int,
    gpu: Any,
    offload: bool,
    target_latency: Any = None,
) -> SpecSetup | None:
    """The run's speculative decoding (None when off, or ``num_speculative_tokens``
    0); ``target`` the target model (an EAGLE head is derived from it);
    ``target_latency`` the target's latency model: when it is the roofline, the draft
    model's runs at its factors (the catalog's, or an efficiency file's) and pads to the
    same CUDA graph sizes, as vLLM's drafter dispatches its forwards through the
    engine's captured sizes (``vllm/v1/spec_decode/llm_base_proposer.py``,
    ``_determine_batch_execution_and_padding``); otherwise (a GPU-harness fit) at the
    catalog's factors, unpadded. ValueError
    naming ``--speculative-config`` when it cannot run: ``1 + k`` beyond the limits
    (:func:`sim.spec_decode.config.check_speculative`), or with the CPU offload tier."""
    settings: SpeculativeSettings | None = engine.speculative_config
    if settings is None or not settings.enabled:
        return None
    if offload:
        raise ValueError(
            f"{FLAG}: speculative decoding with the CPU KV offload tier "
            "(--kv-offloading-size) is not modelled by kvsim; drop one of them"
        )
    check_speculative(settings, max_model_len, max_num_batched_tokens)
    config = settings.kvcore_config()
    draft_latency = None
    draft = None
    if engine.latency_model != "constant":
        draft = draft_model_of(engine, target)
    if draft is not None:
        same = target_latency if isinstance(target_latency, RooflineLatencyModel) else None
        draft_latency = make_latency_model(
            "roofline",
            model=draft,
            gpu=gpu,
            tensor_parallel_size=engine.tensor_parallel_size,
            kv_cache_dtype=engine.kv_cache_dtype,
            efficiency=same.eff if same is not None else None,
            cudagraph_sizes=same.cudagraph_sizes if same is not None else (),
        )
    return SpecSetup(
        settings,
        config,
        settings.acceptance(),
        DrafterCost(config.method, config.num_speculative_tokens, draft_latency),
    )


TIMELINE_COLUMNS = ("replica", "end_s", "num_drafts", "num_draft_tokens", "num_accepted_tokens")
"""``spec_decode.csv``'s columns: one row per applied step that verified drafts."""


def write_timeline(path: Path, runs: list[SpecDecodeRun]) -> None:
    """``spec_decode.csv``: every replica's steps with drafts, by end time (s), then
    replica (``runs[i]`` is replica ``i``'s)."""
    rows = [(t, i, d, n, a) for i, r in enumerate(runs) for (t, d, n, a) in r.timeline]
    rows.sort(key=lambda row: (row[0], row[1]))
    with path.open("w", newline="") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(TIMELINE_COLUMNS)
        out.writerows((i, repr(t), d, n, a) for t, i, d, n, a in rows)


def spec_summary(
    setup: SpecSetup, runs: list[SpecDecodeRun], output_tokens: int, num_steps: int
) -> dict[str, Any]:
    """``summary.json``'s ``spec_decode`` block over all replicas.

    ``acceptance_rate``: accepted over draft tokens; ``mean_accepted_tokens``: accepted
    per draft; ``mean_acceptance_length``: ``1 +`` that (vLLM's); per position: the
    share of drafts whose position ``i`` was accepted; ``tokens_per_step``: output
    tokens over engine steps; ``tokens_per_decode``: tokens a scheduled decode emitted
    (``1 + a``, averaged over request-steps)."""
    k = setup.config.num_speculative_tokens
    total = SpecDecodingStats.new(k)
    for r in runs:
        total = total.merged(r.stats)
    drafts = total.num_drafts
    request_steps = sum(r.decode_request_steps for r in runs)
    return {
        "method": setup.config.method,
        "num_speculative_tokens": k,
        **({"draft_model": setup.settings.model} if setup.settings.model else {}),
        "num_drafts": drafts,
        "num_draft_tokens": total.num_draft_tokens,
        "num_accepted_tokens": total.num_accepted_tokens,
        "acceptance_rate": (
            total.num_accepted_tokens / total.num_draft_tokens if total.num_draft_tokens else 0.0
        ),
        "mean_accepted_tokens": total.num_accepted_tokens / drafts if drafts else 0.0,
        "mean_acceptance_length": 1.0 + total.num_accepted_tokens / drafts if drafts else 1.0,
        "acceptance_rate_per_pos": [
            a / drafts if drafts else 0.0 for a in total.num_accepted_tokens_per_pos
        ],
        "tokens_per_step": output_tokens / num_steps if num_steps else 0.0,
        "tokens_per_decode": (
            sum(r.decode_tokens for r in runs) / request_steps if request_steps else 0.0
        ),
        "drafter_s": sum(r.drafter_s for r in runs),
        "num_steps_drafter_skipped": sum(r.num_skipped for r in runs),
        "model": setup.acceptance.describe(),
    }
