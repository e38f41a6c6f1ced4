"""``--speculative-config``: vLLM's speculative decoding settings, with kvsim's
acceptance knobs.

vLLM 0.33.0 takes ``--speculative-config '{"method": "ngram",
"num_speculative_tokens": 3}'`` (a JSON object); kvsim reads the same keys
(``method``, ``num_speculative_tokens``, ``model`` for ``draft_model``) and two of its
own (:mod:`sim.spec_decode.acceptance`):

- ``acceptance_rate``: the conditional acceptance rate of each draft position, one
  number for all or a list of ``num_speculative_tokens`` numbers in [0, 1]; left
  out: the method's default.
- ``proposal_rate``: ``ngram`` / ``ngram_gpu`` only, the chance the n-gram lookup
  finds a match and proposes (in [0, 1]); left out: the default.

``num_speculative_tokens: 0`` is kvsim's way to say *off* in a file or a sweep axis
(vLLM has no such value): the engine then runs without speculative decoding, exactly
as without the key. Checks that need the resolved engine (``1 + k`` within
``max_model_len`` and ``max_num_batched_tokens``, the draft model in the catalog, the
CPU offload tier) are :func:`check_speculative`'s.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from kvcore.spec_decode import SpeculativeConfig, check_spec_method
from sim.spec_decode.acceptance import AcceptanceModel

FLAG = "--speculative-config"


class SpeculativeSettings(BaseModel):
    """One engine's speculative decoding: vLLM's keys and kvsim's acceptance knobs."""

    model_config = ConfigDict(
        defer_build=True, extra="forbid", frozen=True, strict=True, allow_inf_nan=False
    )

    method: str
    num_speculative_tokens: int = Field(ge=0)
    """Draft tokens per request per step (``k``); 0: speculative decoding off."""
    model: str | None = None
    """The draft model (a catalog name or a model JSON file) of ``draft_model``; for
    ``eagle`` / ``eagle3`` the head's name (recorded; kvsim derives the head's size
    from the target model)."""
    acceptance_rate: float | list[float] | None = None
    proposal_rate: float | None = Field(None, ge=0.0, le=1.0)

    @field_validator("method")
    @classmethod
    def _method(cls, value: str) -> str:
        check_spec_method(value)  # ValueError: pydantic reports it on the key
        return value

    @field_validator("acceptance_rate")
    @classmethod
    def _rates(cls, value: float | list[float] | None) -> float | list[float] | None:
        rates = [] if value is None else value if isinstance(value, list) else [value]
        for r in rates:
            if not 0.0 <= r <= 1.0:
                raise PydanticCustomError(
                    "spec_rate", "each rate must be in [0, 1] (got {got})", {"got": r}
                )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeSettings:
        k = self.num_speculative_tokens
        if self.method == "draft_model" and self.model is None:
            raise ValueError("method draft_model needs model (a draft model of the catalog)")
        if self.method.startswith("ngram") and self.model is not None:
            raise ValueError(f"model is not used by method {self.method} (no model drafts)")
        if self.proposal_rate is not None and not self.method.startswith("ngram"):
            raise ValueError(
                "proposal_rate is for the n-gram methods only (a draft model or EAGLE head "
                "always proposes)"
            )
        if isinstance(self.acceptance_rate, list) and k and len(self.acceptance_rate) != k:
            raise ValueError(
                f"acceptance_rate has {len(self.acceptance_rate)} rates for "
                f"num_speculative_tokens {k} (give one rate, or one per position)"
            )
        return self

    @property
    def enabled(self) -> bool:
        """Whether speculative decoding runs (``num_speculative_tokens >= 1``)."""
        return self.num_speculative_tokens >= 1

    def kvcore_config(self) -> SpeculativeConfig:
        """The scheduler's view (``kvcore.spec_decode.SpeculativeConfig``)."""
        return SpeculativeConfig(self.method, self.num_speculative_tokens)

    def acceptance(self) -> AcceptanceModel:
        """The acceptance model (:mod:`sim.spec_decode.acceptance`) of these settings."""
        return AcceptanceModel.build(
            self.method, self.num_speculative_tokens, self.acceptance_rate, self.proposal_rate
        )


def parse_json_object(value: Any) -> Any:
    """``--speculative-config``'s JSON text as a mapping (anything else as it is, for
    the model's own checks); PydanticCustomError when the text is not a JSON
    object."""
    if not isinstance(value, str):
        return value
    try:
        loaded = json.loads(value)
    except json.JSONDecodeError as e:
        raise PydanticCustomError(
            "spec_json",
            "not JSON ({problem} at character {pos}): {got}",
            {"problem": e.msg, "pos": e.pos, "got": repr(value)},
        ) from None
    if not isinstance(loaded, dict):
        raise PydanticCustomError(
            "spec_json",
            'expected a JSON object such as {"method": "ngram", "num_speculative_tokens": 3} '
            "(got {got})",
            {"got": repr(value)},
        )
    return loaded


def check_speculative(
    settings: SpeculativeSettings, max_model_len: int, max_num_batched_tokens: int
) -> None:
    """ValueError naming the flag when ``1 + k`` query tokens of one request (and a
    draft model's extra drafting slot) exceed ``max_model_len`` or
    ``max_num_batched_tokens`` (tokens)."""
    cfg = settings.kvcore_config()
    need = 1 + cfg.num_speculative_tokens + cfg.max_num_new_slots_for_drafting
    for name, limit in (
        ("max_model_len", max_model_len),
        ("max_num_batched_tokens", max_num_batched_tokens),
    ):
        if need > limit:
            raise ValueError(
                f"{FLAG}: num_speculative_tokens {cfg.num_speculative_tokens} needs {need} "
                f"tokens per request per step, more than {name} ({limit}); lower it"
            )
