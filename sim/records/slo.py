"""Service-level objectives: the bounds ``kvsim plan`` searches against and a sweep's
report marks points by (``slo:`` in either spec). Seconds, over the measurement window
(``summary.json`` ``window``); preemptions per request.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

SLO_KEYS = (
    "ttft_mean_s",
    "ttft_p90_s",
    "tpot_mean_s",
    "tpot_p99_s",
    "e2e_p99_s",
    "max_preemptions_per_request",
)


class SLO(BaseModel):
    """Service-level objectives; a run meets them when every given bound holds.
    Strict values, as in the plan and sweep specs."""

    model_config = ConfigDict(
        defer_build=True, extra="forbid", frozen=True, strict=True, allow_inf_nan=False
    )

    ttft_mean_s: float | None = Field(default=None, gt=0)
    ttft_p90_s: float | None = Field(default=None, gt=0)
    tpot_mean_s: float | None = Field(default=None, gt=0)
    tpot_p99_s: float | None = Field(default=None, gt=0)
    e2e_p99_s: float | None = Field(default=None, gt=0)
    max_preemptions_per_request: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _some(self) -> SLO:
        if all(getattr(self, k) is None for k in SLO_KEYS):
            raise ValueError(f"give at least one of {', '.join(SLO_KEYS)}")
        return self

    def bounds(self) -> dict[str, float]:
        """The SLOs that were given, by name."""
        return {k: getattr(self, k) for k in SLO_KEYS if getattr(self, k) is not None}
