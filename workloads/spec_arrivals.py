"""YAML models of arrival processes.

Open loop (arrivals do not depend on completions)::

    arrival: {type: poisson, rate: 8}                    # requests per second
    arrival: {type: gamma, rate: 8, burstiness: 0.5}     # as `vllm bench serve --burstiness`
    arrival: {type: constant, rate: 8}                   # evenly spaced
    arrival: {type: piecewise, segments: [{until_s: 60, rate: 2}, {rate: 10}]}
    arrival: {type: burst}                               # every request at t = 0

Closed loop (each client waits for its previous request)::

    arrival: {type: closed_loop, concurrency: 64, think_time_s: 0.5}

As in ``vllm bench serve``, the first open-loop request arrives at t = 0.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from workloads.spec_lengths import StrictModel


class PoissonArrival(StrictModel):
    """Exponential inter-arrival times with mean ``1 / rate`` seconds."""

    type: Literal["poisson"]
    rate: float = Field(gt=0, description="requests per second")


class GammaArrival(StrictModel):
    """Gamma inter-arrival times: shape ``burstiness``, scale ``1 / (rate * burstiness)``.

    This is ``vllm bench serve --burstiness``: 1 is Poisson, below 1 is burstier, above
    1 is more regular. The squared coefficient of variation of the gaps is
    ``1 / burstiness``.
    """

    type: Literal["gamma"]
    rate: float = Field(gt=0, description="requests per second")
    burstiness: float = Field(gt=0)


class ConstantArrival(StrictModel):
    """One request every ``1 / rate`` seconds."""

    type: Literal["constant"]
    rate: float = Field(gt=0, description="requests per second")


class RateSegment(StrictModel):
    """Rate ``rate`` (requests per second) until simulated time ``until_s``.

    ``until_s`` may be left out on the last segment only: its rate then holds forever
    (it also holds forever when it is given).
    """

    until_s: float | None = Field(default=None, gt=0)
    rate: float = Field(ge=0)


class PiecewiseArrival(StrictModel):
    """A rate that changes over time: a non-homogeneous renewal process.

    Gaps are drawn with mean 1 in "operational time" (Gamma with shape ``burstiness``;
    1 is Poisson) and mapped through the cumulative rate, so a segment of rate r gets
    r arrivals per second on average. A rate of 0 pauses arrivals.
    """

    type: Literal["piecewise"]
    segments: list[RateSegment] = Field(min_length=1)
    burstiness: float = Field(default=1.0, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> PiecewiseArrival:
        ends = [s.until_s for s in self.segments]
        if any(end is None for end in ends[:-1]):
            raise ValueError("only the last segment may leave out until_s")
        known = [e for e in ends if e is not None]
        if any(b <= a for a, b in zip(known, known[1:])):
            raise ValueError(f"until_s must increase from segment to segment (got {known})")
        if self.segments[-1].rate <= 0:
            raise ValueError("the last segment's rate must be > 0 (it holds forever)")
        return self


class BurstArrival(StrictModel):
    """Every request arrives at t = 0 (``vllm bench serve --request-rate inf``)."""

    type: Literal["burst"]


class ClosedLoopArrival(StrictModel):
    """``concurrency`` clients; each sends its next request ``think_time_s`` seconds
    after its previous one finished (``vllm bench serve --max-concurrency`` with
    think time). All clients send their first request at t = 0.
    """

    type: Literal["closed_loop"]
    concurrency: int = Field(ge=1)
    think_time_s: float = Field(default=0.0, ge=0)


OpenLoopArrival = PoissonArrival | GammaArrival | ConstantArrival | PiecewiseArrival | BurstArrival
"""Any one of the open-loop arrival models."""

ArrivalSpec = Annotated[
    PoissonArrival
    | GammaArrival
    | ConstantArrival
    | PiecewiseArrival
    | BurstArrival
    | ClosedLoopArrival,
    Field(discriminator="type"),
]
"""One of the arrival processes above, chosen by ``type``."""

OPEN_LOOP_TYPES = ("poisson", "gamma", "constant", "piecewise", "burst")
