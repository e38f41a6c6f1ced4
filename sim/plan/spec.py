"""The plan spec (``kvsim plan PLAN.yaml`` or flags), validated strictly.

Schema (every key optional unless said otherwise)::

    workload: chat            # preset name or workload YAML (a synthetic spec)
    model: Llama-3.1-8B
    gpu: H100-SXM
    engine: {max_num_seqs: 64}   # EngineConfig fields (vLLM engine-argument names)
    num_requests: 300         # each probe run's starting length (default: the workload's)
    seeds: [0, 1, 2]          # a probe passes only if every seed passes (default [0, 1])
    slo:                      # required, at least one; all > 0
      ttft_mean_s: 0.2        # seconds; mean TTFT over the measurement window
      ttft_p90_s: 0.5
      tpot_mean_s: 0.03
      tpot_p99_s: 0.05
      e2e_p99_s: 30
      max_preemptions_per_request: 0.1
    question: max_rate        # max_rate | min_replicas | min_kv (required)
    pd: prefill=2,decode=6    # P/D: max_rate of this split; min_replicas: the fewest
                              # P + D instances (at most these counts) and the split
    rate: 20                  # min_replicas (required), min_kv: the target rate, req/s
    num_replicas: 1           # max_rate, min_kv: replicas behind the router
    router: round_robin       # round_robin | least_outstanding | least_kv | prefix_aware
    knob: num_gpu_blocks      # min_kv: num_gpu_blocks | gpu_memory_utilization | max_num_seqs
    search: {low: 0.5, high: 64, rel_tol: 0.05, max_probes: 12}
    length: {precision: 0.05, max_factor: 16, fixed: false, confirm_sojourns: 50}
    steps: full               # probe runs' steps.csv: full | thin | none (sim.records.step_thin)
    steps_format: csv         # csv | parquet (steps.parquet; needs pyarrow)

``search.high`` may be left out: for max_rate and min_replicas the search then doubles
from ``low`` until a probe fails (max_rate) or passes (min_replicas); for min_kv it
defaults to the base configuration's value of the knob (its block count or
max_num_seqs; gpu_memory_utilization 0.95). Defaults of ``low``:
0.5 req/s, 1 replica, 16 blocks, gpu_memory_utilization 0.1, max_num_seqs 1. For
min_kv on blocks or gpu_memory_utilization, a ``low`` below the configuration bound
(where the engine can start with ``engine.max_model_len``: one full-length request's
KV cache must fit; see ``sim.plan.config_bound``) is raised to it.

A P/D ``min_replicas`` plan (``pd`` given) walks the prefill:decode splits up to
``pd``'s counts instead of bisecting (``search.low`` and ``high`` are refused;
``max_probes`` defaults to 24 there; :mod:`sim.plan.pd_search`).

``engine`` takes every ``kvsim run`` engine flag (``kvsim plan --max-model-len ...``
sets ``engine.max_model_len``), validated as in an engine file.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.app.engine_config import EngineConfig
from sim.app.pd_config import parse_pd
from sim.app.run import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_WORKLOAD
from sim.app.spec_file import spec_data
from sim.engine.router import ROUTERS
from sim.records.slo import SLO, SLO_KEYS  # noqa: F401 (SLO_KEYS: the names, re-exported)
from workloads.errors import from_validation_error

QUESTIONS = ("max_rate", "min_replicas", "min_kv")
KNOBS = ("num_gpu_blocks", "gpu_memory_utilization", "max_num_seqs")


class PlanError(ValueError):
    """Bad plan input; ``str(err)`` is one line naming the file and the field."""


class _Strict(BaseModel):
    """Strict values, as in workload YAML and traces: integers only where an integer is
    wanted (not ``"2"`` or ``2.0``), numbers (finite) where a float is."""

    model_config = ConfigDict(
        defer_build=True, extra="forbid", frozen=True, strict=True, allow_inf_nan=False
    )


class Search(_Strict):
    """Bisection range and stopping rule."""

    low: float | None = Field(default=None, gt=0)
    high: float | None = Field(default=None, gt=0)
    rel_tol: float = Field(default=0.05, gt=0, lt=1)
    max_probes: int = Field(default=12, ge=2, le=64)

    @model_validator(mode="after")
    def _ordered(self) -> Search:
        if self.low is not None and self.high is not None and self.high <= self.low:
            raise ValueError(f"high ({self.high:g}) must be above low ({self.low:g})")
        return self


class Length(_Strict):
    """How long each probe's runs are (see :mod:`sim.plan.length`).

    A seed's run starts at the plan's ``num_requests`` (or the workload's own length)
    and doubles while its verdict is undecided or an SLO metric's 95% interval
    straddles the bound and is wider than ``precision`` (half-width over value), up
    to ``max_factor`` times the start; ``fixed``: every run is the start length (a
    warning where an interval is wider than ``precision``). The search's answer is
    confirmed by runs whose windows span ``confirm_sojourns`` mean sojourn times.
    """

    precision: float = Field(default=0.05, gt=0, lt=1)
    max_factor: int = Field(default=16, ge=1, le=1024)
    fixed: bool = False
    confirm_sojourns: float = Field(default=50.0, ge=0, le=10_000)
    """The answer's seeds run until their measurement windows span this many mean
    sojourn times (up to ``max_factor``); 0 or ``fixed``: no confirmation."""


class PlanSpec(_Strict):
    """A capacity question; see the module docstring."""

    workload: str = DEFAULT_WORKLOAD
    model: str = DEFAULT_MODEL
    gpu: str = DEFAULT_GPU
    engine: EngineConfig = Field(default_factory=EngineConfig)
    num_requests: int | None = Field(default=None, ge=1)
    seeds: list[int] = Field(default_factory=lambda: [0, 1], min_length=1)
    slo: SLO
    question: Literal["max_rate", "min_replicas", "min_kv"]
    rate: float | None = Field(default=None, gt=0)
    num_replicas: int = Field(default=1, ge=1)
    router: str = "round_robin"
    pd: str | None = None
    """``--pd``'s text or file (:mod:`sim.app.pd_config`). ``max_rate``: every probe runs
    that prefill:decode split; ``min_replicas``: the fewest prefill + decode instances
    at ``rate`` and their split, at most pd's counts of each (:mod:`sim.plan.pd_search`);
    None: colocated replicas."""
    knob: Literal["num_gpu_blocks", "gpu_memory_utilization", "max_num_seqs"] = "num_gpu_blocks"
    search: Search = Field(default_factory=Search)
    length: Length = Field(default_factory=Length)
    steps: Literal["full", "thin", "none"] = "full"
    """Each probe run's ``steps.csv`` (``sim.records.step_thin``): a full row per step, thinned
    to bounded rows, or none."""
    steps_format: Literal["csv", "parquet"] = "csv"
    """``parquet``: the probe runs write ``steps.parquet`` (needs pyarrow)."""

    @model_validator(mode="after")
    def _consistent(self) -> PlanSpec:
        if self.router not in ROUTERS:
            raise ValueError(
                f"router: unknown router {self.router!r}; allowed: {', '.join(ROUTERS)}"
            )
        if any(s < 0 for s in self.seeds) or len(set(self.seeds)) != len(self.seeds):
            raise ValueError("seeds: must be distinct integers >= 0")
        if self.question == "max_rate" and self.rate is not None:
            raise ValueError("rate: max_rate searches the rate; leave rate out")
        if self.question == "min_replicas" and self.rate is None:
            raise ValueError("rate: min_replicas needs the target rate (req/s)")
        if self.pd is not None:
            if self.question == "min_kv":
                raise ValueError(
                    "pd: a P/D plan asks max_rate (of pd's split) or min_replicas (the "
                    "fewest prefill + decode instances, up to pd's counts), not min_kv"
                )
            if self.question == "min_replicas" and (
                self.search.low is not None or self.search.high is not None
            ):
                raise ValueError(
                    "search: a P/D min_replicas plan searches up to pd's prefill and "
                    "decode counts; leave search.low and search.high out"
                )
            if self.num_replicas != 1:
                raise ValueError("num_replicas: a P/D plan sizes its pools with pd; leave it 1")
            parse_pd(self.pd)
        dp = self.engine.data_parallel_size
        if dp > 1 and self.question == "min_replicas":
            raise ValueError(
                "engine.data_parallel_size: min_replicas searches one replica at a time; "
                "with data parallelism ask max_rate of num_replicas DP groups"
            )
        if self.num_replicas % dp:
            raise ValueError(
                f"num_replicas: must be a multiple of engine.data_parallel_size {dp} "
                f"(each DP rank is one replica; got {self.num_replicas})"
            )
        return self


def load_plan(path: str | None, overrides: dict[str, Any]) -> PlanSpec:
    """A plan from a YAML file (safe loading), then flags (flags win). PlanError if bad."""
    source = path or "plan flags"
    data = spec_data(path, overrides, "plan", PlanError)
    try:
        return PlanSpec.model_validate(data)
    except ValidationError as e:
        raise PlanError(str(from_validation_error(e, source, PlanSpec))) from None
