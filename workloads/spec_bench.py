"""Spec parts of the workloads benchmarks send: a fixed prompt pool and load stages.

A prompt pool::

    prompt_pool: {size: 100, order: shuffled}        # lengths from prompt_len/output_len
    prompt_pool:                                     # inference-perf's shared-prefix data
      order: random
      groups: {num_groups: 4, num_prompts_per_group: 25, system_prompt_len: 1000,
               question_len: 50, output_len: 200}

Stages::

    stages:
      - {arrival: {type: poisson, rate: 2}, duration_s: 60}
      - {arrival: {type: poisson, rate: 8}, num_requests: 500, start: after_drain}

Lengths are in tokens, times in seconds.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from workloads.spec_arrivals import ArrivalSpec
from workloads.spec_lengths import StrictModel

PoolOrder = Literal["fixed", "shuffled", "random"]
"""How pool prompts are sent: ``fixed`` (in turn, cycling), ``shuffled`` (a fresh
permutation every cycle), ``random`` (drawn with replacement)."""


class PoolGroups(StrictModel):
    """inference-perf's shared-prefix data: ``num_groups`` groups of
    ``num_prompts_per_group`` prompts; every prompt of a group is the group's system
    prompt (``system_prompt_len`` tokens) followed by its own question
    (``question_len`` tokens), and asks for ``output_len`` tokens."""

    num_groups: int = Field(ge=1)
    num_prompts_per_group: int = Field(ge=1)
    system_prompt_len: int = Field(ge=0, description="tokens")
    question_len: int = Field(ge=1, description="tokens")
    output_len: int = Field(ge=1, description="tokens")


class PromptPool(StrictModel):
    """A fixed set of prompts drawn once and sent again and again.

    Give ``size`` (prompts drawn from the workload's ``prompt_len``, ``output_len``,
    ``shared_prefix`` and ``priority``) or ``groups``. A prompt sent twice has the
    same token ids both times, so prefix caching can hit all of it.
    """

    size: int | None = Field(default=None, ge=1)
    groups: PoolGroups | None = None
    order: PoolOrder = "fixed"

    @model_validator(mode="after")
    def _one_source(self) -> PromptPool:
        if (self.size is None) == (self.groups is None):
            raise ValueError("give exactly one of size and groups")
        return self

    @property
    def num_prompts(self) -> int:
        """Prompts in the pool."""
        if self.groups is not None:
            return self.groups.num_groups * self.groups.num_prompts_per_group
        assert self.size is not None
        return self.size


StageStart = Literal["after_previous", "after_drain"]
"""When a stage starts: ``after_previous`` (when the previous stage sent its last
request or its duration ran out) or ``after_drain`` (when every request of the
previous stage also finished)."""


class Stage(StrictModel):
    """One load stage: its own arrival process and length (a request count or a
    duration). Give exactly one of ``num_requests`` and ``duration_s``; a stage's
    ``duration_s`` counts from the stage's start. ``timeout_s`` replaces the
    workload's for the requests of this stage."""

    arrival: ArrivalSpec
    num_requests: int | None = Field(default=None, ge=1)
    duration_s: float | None = Field(default=None, gt=0, description="seconds")
    start: StageStart = "after_previous"
    delay_s: float = Field(default=0.0, ge=0, description="seconds")
    timeout_s: float | None = Field(default=None, gt=0, description="seconds")

    @model_validator(mode="after")
    def _length(self) -> Stage:
        if (self.num_requests is None) == (self.duration_s is None):
            raise ValueError("give exactly one of num_requests and duration_s")
        if self.arrival.type == "burst" and self.num_requests is None:
            raise ValueError("arrival type 'burst' needs num_requests")
        return self
