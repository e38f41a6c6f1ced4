"""YAML models of token-length distributions (prompt, output, turns per session).

Every distribution yields integers >= 1. A bare integer in YAML means ``fixed``::

    output_len: 128
    prompt_len: {type: uniform, min: 100, max: 300}
    prompt_len: {type: normal, mean: 500, std: 100}           # rounded, clipped to >= 1
    prompt_len: {type: lognormal, median: 200, p90: 900}      # see LogNormalLength
    prompt_len: {type: empirical, path: lengths.txt}          # one integer per line
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

Z90 = 1.2815515655446004
"""The 0.9 quantile of the standard normal distribution."""


class StrictModel(BaseModel):
    """Base of every spec model: unknown keys are rejected, instances are frozen.

    Values are strict, as in traces: an integer field takes only a YAML integer (not
    ``"100"``, ``100.0`` or ``true``), a float field a YAML number (an integer is
    fine), never a string; floats must be finite (``.inf`` and ``.nan`` are refused).
    """

    model_config = ConfigDict(
        defer_build=True, extra="forbid", frozen=True, strict=True, allow_inf_nan=False
    )


class FixedLength(StrictModel):
    """Always ``value`` tokens."""

    type: Literal["fixed"] = "fixed"
    value: int = Field(ge=1)


class UniformLength(StrictModel):
    """An integer uniformly drawn from ``[min, max]`` (both included)."""

    type: Literal["uniform"]
    min: int = Field(ge=1)
    max: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


class NormalLength(StrictModel):
    """Normal(mean, std) tokens, rounded to the nearest integer, clipped to ``[1, max]``.

    ``max`` may not be below ``mean`` (the median): most draws would be clipped to it.
    """

    type: Literal["normal"]
    mean: float = Field(gt=0)
    std: float = Field(ge=0)
    max: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _max_above_median(self) -> NormalLength:
        if self.max is not None and self.max < self.mean:
            raise ValueError(
                f"max ({self.max}) is below the median ({self.mean:g}, the mean); "
                "max must be >= the median"
            )
        return self


class LogNormalLength(StrictModel):
    """Log-normal lengths, rounded to the nearest integer and clipped to ``[1, max]``.

    Give exactly one of three parameter pairs (``sigma`` is the standard deviation of
    ``log(length)``, i.e. numpy's ``sigma``):

    - ``median`` and ``p90``: ``mu = ln(median)``, ``sigma = ln(p90 / median) / 1.2816``;
      the easiest to read off a histogram of a real dataset;
    - ``median`` and ``sigma``: ``mu = ln(median)``;
    - ``mean`` and ``sigma``: ``mean`` is the mean length before rounding and clipping,
      ``mu = ln(mean) - sigma**2 / 2``.

    ``max`` may not be below the median ``exp(mu)``: most draws would be clipped to it.
    """

    type: Literal["lognormal"]
    mean: float | None = Field(default=None, gt=0)
    median: float | None = Field(default=None, gt=0)
    sigma: float | None = Field(default=None, gt=0)
    p90: float | None = Field(default=None, gt=0)
    max: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_form(self) -> LogNormalLength:
        given = tuple(k for k in ("mean", "median", "sigma", "p90") if getattr(self, k) is not None)
        if given not in (("median", "p90"), ("median", "sigma"), ("mean", "sigma")):
            raise ValueError(
                "give exactly one of: (median, p90), (median, sigma), (mean, sigma); "
                f"got ({', '.join(given)})"
            )
        if self.p90 is not None and self.median is not None and self.p90 <= self.median:
            raise ValueError(f"p90 ({self.p90}) must be > median ({self.median})")
        if self.max is not None:
            median = math.exp(self.mu_sigma()[0])
            if self.max < median:
                raise ValueError(
                    f"max ({self.max}) is below the median ({median:g}); max must be >= the median"
                )
        return self

    def mu_sigma(self) -> tuple[float, float]:
        """The parameters (mu, sigma) of ``log(length)``."""
        if self.p90 is not None and self.median is not None:
            return math.log(self.median), math.log(self.p90 / self.median) / Z90
        assert self.sigma is not None
        if self.median is not None:
            return math.log(self.median), self.sigma
        assert self.mean is not None
        return math.log(self.mean) - self.sigma**2 / 2, self.sigma


class EmpiricalLength(StrictModel):
    """Draw uniformly from the lengths listed in ``path``.

    ``path`` is relative to the YAML file that names it; the file holds one positive
    integer per line (blank lines and lines starting with ``#`` are ignored).
    """

    type: Literal["empirical"]
    path: str = Field(min_length=1)


def absolute_empirical_paths(data: Any, base_dir: Path) -> None:
    """Make every ``empirical`` distribution's relative ``path`` in a spec's plain data
    absolute against ``base_dir`` (where the YAML that named it lives), in place: for a
    copy of the spec written elsewhere (a plan's probe, a capacity plan)."""
    if isinstance(data, dict):
        path = data.get("path")
        if data.get("type") == "empirical" and isinstance(path, str):
            data["path"] = str((base_dir / path).resolve())
        for value in data.values():
            absolute_empirical_paths(value, base_dir)
    elif isinstance(data, list):
        for value in data:
            absolute_empirical_paths(value, base_dir)


def _fixed_shorthand(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return {"type": "fixed", "value": value}
    return value


LengthModel = FixedLength | UniformLength | NormalLength | LogNormalLength | EmpiricalLength
"""Any one of the length-distribution models."""

LengthDist = Annotated[
    FixedLength | UniformLength | NormalLength | LogNormalLength | EmpiricalLength,
    Field(discriminator="type"),
    BeforeValidator(_fixed_shorthand),
]
"""A token-length distribution; an integer stands for ``{type: fixed, value: N}``."""
