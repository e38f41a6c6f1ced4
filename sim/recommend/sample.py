"""The workload's request lengths, drawn as a run draws them, for the analytic bounds.

Session ``i`` of a synthetic workload depends only on the seed and ``i``
(:class:`workloads.sessions.SessionPlanner`), so the first sessions' lengths here are
the ones the simulation sends. A turn's full prompt is its shared prefix (first turn),
or the conversation so far (later turns), plus its new tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workloads.sessions import SessionPlanner
from workloads.spec import WorkloadSpec
from workloads.synthetic import build_samplers

SAMPLE_SESSIONS = 2000
"""Sessions drawn for the bounds (a p99 over them is steady to a few percent)."""


@dataclass(frozen=True)
class LengthSample:
    """Per request (session turn), tokens: ``prompt`` the whole prompt, ``new`` the part
    no earlier request sent (no shared prefix, no history), ``output`` the output."""

    prompt: np.ndarray
    new: np.ndarray
    output: np.ndarray

    def within(self, max_model_len: int) -> LengthSample:
        """The requests an engine of ``max_model_len`` serves (shorter prompts), with
        outputs cut where the context ends, as vLLM does."""
        keep = self.prompt < max_model_len
        prompt = self.prompt[keep]
        output = np.minimum(self.output[keep], max_model_len - prompt)
        return LengthSample(prompt, self.new[keep], np.maximum(output, 1))


def draw_lengths(
    spec: WorkloadSpec, base_dir: Path, file: str, sessions: int = SAMPLE_SESSIONS
) -> LengthSample:
    """The lengths of the first ``sessions`` sessions of ``spec``."""
    prompt_s, output_s, turns_s = build_samplers(spec, base_dir, file)
    planner = SessionPlanner(spec, spec.seed, prompt_s, output_s, turns_s)
    prefix_len = spec.shared_prefix.prefix_len if spec.shared_prefix else 0
    prompts: list[int] = []
    news: list[int] = []
    outputs: list[int] = []
    for i in range(sessions):
        plan = planner.plan(i, None, None)
        context = prefix_len if plan.group is not None else 0
        for new, out in zip(plan.new_lens, plan.out_lens):
            prompts.append(context + new)
            news.append(new)
            outputs.append(out)
            context += new + out
    return LengthSample(
        np.asarray(prompts, dtype=np.int64),
        np.asarray(news, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
    )
