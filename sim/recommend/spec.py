"""The recommend spec (``kvsim recommend RECOMMEND.yaml`` or flags), validated strictly.

Schema (every key optional unless said otherwise; docs/recommend.md has the tables)::

    model: Llama-3.1-70B
    workload: chat              # preset or workload YAML with a poisson/gamma/constant rate
    slo: {ttft_p90_s: 1.0, tpot_p99_s: 0.06}   # required: kvsim plan's SLO names
    target_rate: 50             # req/s the deployment must serve; left out: the
                                # objective is goodput per GPU (no replica count)
    router: least_outstanding   # the cluster's router in the verification runs
    engine: {max_model_len: 8192}   # engine fields every candidate shares
    space:                      # the search space: every combination is a candidate
      gpus: [A100-80GB, H100-SXM, H200]
      tensor_parallel_size: [2, 4, 8]  # default: 1, 2, 4, 8 where the model allows it
      max_num_seqs: [128, 256]
      max_num_batched_tokens: [8192]
      gpu_memory_utilization: [0.9]
      kv_cache_dtype: [auto]
      enable_prefix_caching: [true]
    prices: {H100-SXM: 2.9}     # USD per GPU-hour by GPU name, or a YAML file of them
    top: 5
    search: {num_requests: 400, seeds: [0], rel_tol: 0.1, max_probes: 10,
             low_fraction: 0.03125, length: {max_factor: 4}}
    verify: {num_requests: 10000, seeds: [0], fewer: true, max_extra_replicas: 2}
    keep_runs: false

A space axis left out takes the base ``engine``'s value (one value). Each candidate's
per-replica capacity is ``kvsim plan``'s max_rate search (``search`` holds its
settings; ``length`` is the plan's), so the same SLO names and judging apply.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.app.engine_config import EngineConfig
from sim.app.spec_file import spec_data
from sim.defaults import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_WORKLOAD
from sim.engine.router import ROUTERS
from sim.plan.spec import SLO
from sim.plan.spec import Length as PlanLength
from workloads.errors import from_validation_error

OBJECTIVES = ("cost", "goodput_per_gpu")
DEFAULT_TP_SIZES = (1, 2, 4, 8)
"""Tensor-parallel sizes tried when ``space.tensor_parallel_size`` is left out (one
node), each kept only where the model allows it (heads divide) and the engine starts."""


class RecommendError(ValueError):
    """Bad recommend input; ``str(err)`` is one line naming the file and the field."""


class _Strict(BaseModel):
    """Strict values, as in plan and workload YAML."""

    model_config = ConfigDict(
        defer_build=True, extra="forbid", frozen=True, strict=True, allow_inf_nan=False
    )


def _distinct(name: str, values: list[Any] | None) -> None:
    if values is not None and len(set(values)) != len(values):
        raise ValueError(f"{name}: values must be distinct")


class Space(_Strict):
    """The search space; each list is one axis of the candidate grid."""

    gpus: list[str] = Field(default_factory=lambda: [DEFAULT_GPU], min_length=1)
    tensor_parallel_size: list[int] | None = Field(default=None, min_length=1)
    max_num_seqs: list[int] | None = Field(default=None, min_length=1)
    max_num_batched_tokens: list[int] | None = Field(default=None, min_length=1)
    gpu_memory_utilization: list[float] | None = Field(default=None, min_length=1)
    kv_cache_dtype: list[Literal["auto", "fp8"]] | None = Field(default=None, min_length=1)
    enable_prefix_caching: list[bool] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _check(self) -> Space:
        for name in type(self).model_fields:
            _distinct(name, getattr(self, name))
        for name in ("tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens"):
            values = getattr(self, name)
            if values is not None and any(v < 1 for v in values):
                raise ValueError(f"{name}: every value must be >= 1")
        util = self.gpu_memory_utilization
        if util is not None and any(not 0 < u <= 1 for u in util):
            raise ValueError("gpu_memory_utilization: every value must be in (0, 1]")
        return self


class Search(_Strict):
    """Settings of each candidate's max_rate search (``kvsim plan``'s, per candidate).

    The search runs between ``low_fraction`` times the candidate's analytic upper bound
    on its rate and that bound times ``bound_slack`` (:mod:`sim.recommend.bounds`)."""

    num_requests: int = Field(default=400, ge=1)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    rel_tol: float = Field(default=0.1, gt=0, lt=1)
    max_probes: int = Field(default=10, ge=2, le=64)
    low_fraction: float = Field(default=1 / 32, gt=0, lt=1)
    bound_slack: float = Field(default=1.25, ge=1, le=100)
    length: PlanLength = Field(default_factory=lambda: PlanLength(max_factor=4))

    @model_validator(mode="after")
    def _seeds(self) -> Search:
        if any(s < 0 for s in self.seeds) or len(set(self.seeds)) != len(self.seeds):
            raise ValueError("seeds: must be distinct integers >= 0")
        return self


class Verify(_Strict):
    """The whole-cluster runs at the target rate that check the top candidates."""

    num_requests: int = Field(default=10_000, ge=1)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    fewer: bool = True
    max_extra_replicas: int = Field(default=2, ge=0, le=16)

    @model_validator(mode="after")
    def _seeds(self) -> Verify:
        if any(s < 0 for s in self.seeds) or len(set(self.seeds)) != len(self.seeds):
            raise ValueError("seeds: must be distinct integers >= 0")
        return self


class RecommendSpec(_Strict):
    """A deployment question; see the module docstring."""

    model: str = DEFAULT_MODEL
    workload: str = DEFAULT_WORKLOAD
    slo: SLO
    target_rate: float | None = Field(default=None, gt=0)
    objective: Literal["cost", "goodput_per_gpu"] | None = None
    router: str = "round_robin"
    engine: EngineConfig = Field(default_factory=EngineConfig)
    space: Space = Field(default_factory=Space)
    prices: dict[str, float] | str | None = None
    top: int = Field(default=5, ge=1, le=100)
    search: Search = Field(default_factory=Search)
    verify: Verify = Field(default_factory=Verify)
    keep_runs: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> RecommendSpec:
        if self.router not in ROUTERS:
            raise ValueError(
                f"router: unknown router {self.router!r}; allowed: {', '.join(ROUTERS)}"
            )
        if self.objective == "cost" and self.target_rate is None:
            raise ValueError("objective: cost needs target_rate (req/s)")
        if isinstance(self.prices, dict) and any(v < 0 for v in self.prices.values()):
            raise ValueError("prices: every price must be >= 0 (USD per GPU-hour)")
        return self

    @property
    def goal(self) -> str:
        """The objective that applies: ``cost`` with a target rate, else
        ``goodput_per_gpu``."""
        if self.objective is not None:
            return self.objective
        return "cost" if self.target_rate is not None else "goodput_per_gpu"


def load_recommend(path: str | None, overrides: dict[str, Any]) -> RecommendSpec:
    """A spec from a YAML file (safe loading), then flags (dotted keys; flags win).
    RecommendError if bad."""
    source = path or "recommend flags"
    data = spec_data(path, overrides, "recommend", RecommendError)
    try:
        return RecommendSpec.model_validate(data)
    except ValidationError as e:
        raise RecommendError(str(from_validation_error(e, source, RecommendSpec))) from None
