"""The workload spec: the top-level YAML model and its prefix, session and priority parts.

A minimal spec::

    arrival: {type: poisson, rate: 8}
    prompt_len: {type: lognormal, median: 200, p90: 900}
    output_len: {type: lognormal, median: 150, p90: 500}
    num_requests: 1000
    seed: 0

A benchmark's workload may instead send a fixed ``prompt_pool`` and run in
``stages``, and give up on requests after ``timeout_s`` (:mod:`workloads.spec_bench`).

Lengths are in tokens, times in seconds, rates in requests per second.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from workloads.spec_arrivals import ArrivalSpec
from workloads.spec_bench import PromptPool, Stage
from workloads.spec_lengths import LengthDist, StrictModel


class UniformPopularity(StrictModel):
    """Every prefix group is equally likely."""

    type: Literal["uniform"]


class ZipfPopularity(StrictModel):
    """Group ``k`` (0-based) is chosen with probability proportional to ``1 / (k + 1) ** s``."""

    type: Literal["zipf"]
    s: float = Field(gt=0)


def _popularity_shorthand(value: Any) -> Any:
    return {"type": value} if isinstance(value, str) else value


Popularity = Annotated[
    UniformPopularity | ZipfPopularity,
    Field(discriminator="type"),
    BeforeValidator(_popularity_shorthand),
]


class SharedPrefix(StrictModel):
    """Shared-prefix groups: a system prompt or a document that many requests start with.

    With probability ``fraction`` a request (a whole session, for multi-turn workloads)
    picks a group by ``popularity`` and its prompt is that group's ``prefix_len`` tokens
    followed by its own ``prompt_len`` tokens. Equal groups give equal token ids.
    """

    num_groups: int = Field(ge=1)
    prefix_len: int = Field(ge=1, description="tokens")
    popularity: Popularity = UniformPopularity(type="uniform")
    fraction: float = Field(default=1.0, ge=0, le=1)

    def probabilities(self) -> list[float]:
        """The probability of each group, in group order."""
        if isinstance(self.popularity, ZipfPopularity):
            weights = [1.0 / (k + 1) ** self.popularity.s for k in range(self.num_groups)]
        else:
            weights = [1.0] * self.num_groups
        total = sum(weights)
        return [w / total for w in weights]


class Sessions(StrictModel):
    """Multi-turn sessions.

    A session has ``turns`` requests. Turn k+1 is sent ``think_time_s`` seconds after
    turn k finished; its prompt is turn k's prompt, then turn k's output tokens, then
    ``prompt_len`` new user tokens. Every turn draws its own ``output_len``.
    """

    turns: LengthDist
    think_time_s: float = Field(default=0.0, ge=0, description="seconds")


class Priorities(StrictModel):
    """Request priorities: ``values`` drawn with ``weights`` (equal weights if omitted)."""

    values: list[int] = Field(min_length=1)
    weights: list[float] | None = None

    @model_validator(mode="after")
    def _matching(self) -> Priorities:
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError(
                    f"weights has {len(self.weights)} entries, values has {len(self.values)}"
                )
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError("weights must be >= 0 with a positive sum")
        return self


OPTIONAL_PARTS = ("prompt_pool", "stages", "timeout_s")
"""Fields left out of the spec's dump when unset, so the resolved configuration of a
workload that does not use them is what it was before they existed."""


class WorkloadSpec(StrictModel):
    """A synthetic workload. Give exactly one of ``num_requests`` and ``duration_s``,
    or ``stages`` (each with its own arrival and length) instead of ``arrival``,
    ``num_requests`` and ``duration_s``.

    ``num_requests`` counts requests (every turn of a session is one request); with
    ``duration_s`` nothing is sent at or after that simulated time. ``max_model_len``
    (tokens) keeps every prompt plus its output within the model's context: a single
    request's own prompt part and output are shortened to fit, and a session ends
    before a turn that would not fit. ``timeout_s``: a request not finished that many
    seconds after its arrival is aborted, as vLLM aborts a request whose client went
    away. With ``prompt_pool.groups``, ``prompt_len`` and ``output_len`` may be left
    out (they are the groups' fixed ``question_len`` and ``output_len``).
    """

    name: str | None = None
    description: str = ""
    seed: int = Field(default=0, ge=0)
    arrival: ArrivalSpec | None = None
    prompt_len: LengthDist
    output_len: LengthDist
    shared_prefix: SharedPrefix | None = None
    sessions: Sessions | None = None
    priority: Priorities | None = None
    num_requests: int | None = Field(default=None, ge=1)
    duration_s: float | None = Field(default=None, gt=0, description="seconds")
    max_model_len: int | None = Field(default=None, ge=2, description="tokens")
    vocab_size: int = Field(default=32000, ge=2)
    prompt_pool: PromptPool | None = None
    stages: list[Stage] | None = Field(default=None, min_length=1)
    timeout_s: float | None = Field(default=None, gt=0, description="seconds")

    @model_validator(mode="before")
    @classmethod
    def _pool_lengths(cls, data: Any) -> Any:
        """``prompt_pool.groups`` gives the lengths: fill them in when left out."""
        if not isinstance(data, dict):
            return data
        pool = data.get("prompt_pool")
        groups = pool.get("groups") if isinstance(pool, dict) else None
        if isinstance(groups, dict):
            data = dict(data)
            if "prompt_len" not in data and isinstance(groups.get("question_len"), int):
                data["prompt_len"] = groups["question_len"]
            if "output_len" not in data and isinstance(groups.get("output_len"), int):
                data["output_len"] = groups["output_len"]
        return data

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadSpec:
        if self.stages is not None:
            if self.sessions is not None:
                raise ValueError("stages send single requests: leave out sessions")
            if self.arrival or self.num_requests is not None or self.duration_s is not None:
                raise ValueError(
                    "with stages, give arrival and num_requests or duration_s in each "
                    "stage, not at the top level"
                )
        else:
            if self.arrival is None:
                raise ValueError("give arrival (or stages)")
            if (self.num_requests is None) == (self.duration_s is None):
                raise ValueError("give exactly one of num_requests and duration_s")
            if self.arrival.type == "burst" and self.num_requests is None:
                raise ValueError("arrival type 'burst' needs num_requests")
        prefix = self.shared_prefix.prefix_len if self.shared_prefix else 0
        if self.max_model_len is not None and prefix + 2 > self.max_model_len:
            raise ValueError(
                f"max_model_len ({self.max_model_len}) leaves no room after "
                f"shared_prefix.prefix_len ({prefix}) for one prompt and one output token"
            )
        if self.prompt_pool is not None:
            self._check_pool(self.prompt_pool)
        return self

    def _check_pool(self, pool: PromptPool) -> None:
        if self.sessions is not None:
            raise ValueError("prompt_pool sends single requests: leave out sessions")
        groups = pool.groups
        if groups is None:
            return
        if self.shared_prefix is not None:
            raise ValueError(
                "prompt_pool.groups gives the shared prefixes (system_prompt_len): "
                "leave out shared_prefix"
            )
        for name, value in (
            ("prompt_len", groups.question_len),
            ("output_len", groups.output_len),
        ):
            dist = getattr(self, name)
            if dist.type != "fixed" or dist.value != value:
                raise ValueError(
                    f"with prompt_pool.groups, leave out {name} (it is the groups' {value})"
                )
        if self.max_model_len is not None and (
            groups.system_prompt_len + groups.question_len + groups.output_len > self.max_model_len
        ):
            raise ValueError(
                f"prompt_pool.groups: system_prompt_len + question_len + output_len "
                f"exceeds max_model_len ({self.max_model_len})"
            )

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The fields, without those of :data:`OPTIONAL_PARTS` that are unset."""
        data = handler(self)
        for name in OPTIONAL_PARTS:
            if data.get(name, 0) is None:
                del data[name]
        return data

    @property
    def all_stages(self) -> list[Stage]:
        """The stages; a workload without ``stages`` is one stage (its own arrival,
        length and timeout)."""
        if self.stages is not None:
            return list(self.stages)
        assert self.arrival is not None
        return [
            Stage(
                arrival=self.arrival,
                num_requests=self.num_requests,
                duration_s=self.duration_s,
                timeout_s=self.timeout_s,
            )
        ]

    def stage_timeout(self, stage: Stage) -> float | None:
        """Seconds after which a request of ``stage`` is aborted (None: never)."""
        return stage.timeout_s if stage.timeout_s is not None else self.timeout_s

    @property
    def total_requests(self) -> int | None:
        """Requests in all when every stage is bounded by a count, else None."""
        if self.stages is None:
            return self.num_requests
        counts = [s.num_requests for s in self.stages]
        return None if any(c is None for c in counts) else sum(c for c in counts if c)
