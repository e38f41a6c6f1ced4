"""The configuration bound of a ``min_kv`` plan: the smallest KV budget at which the
engine starts at all, whatever the workload.

vLLM 0.33.0 refuses to start when one request of ``max_model_len`` tokens does not fit
in the KV cache (``check_enough_kv_cache_memory`` in ``kv_cache_planning.py``, ported
in :mod:`kvcore.kv_cache_planning`): each KV cache group needs
``ceil(max_model_len / block_size)`` blocks (fewer for sliding-window groups), and the
null block is held back first. With the model's full context (131,072 tokens for
Llama-3.1-8B, 8,192 blocks of 16 tokens) that need is far above what a chat workload
uses, so a ``min_kv`` search below it only finds configuration errors. The bound is
found on the budget function itself (:func:`calibrate.budget.compute_kv_budget`, as
``kvsim run`` resolves it), without simulating.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from calibrate.use_calibration import budget_inputs
from kvcore.kv_cache_planning import blocks_per_request, max_in_flight_tokens
from sim.app.engine_config import EngineConfig
from sim.app.setup import ResolvedRun
from sim.plan.spec import PlanSpec

KNOB_FIELD = {
    "num_gpu_blocks": "num_gpu_blocks_override",
    "gpu_memory_utilization": "gpu_memory_utilization",
}
"""The KV knobs a configuration bound applies to, and the engine field each sets."""
UTILIZATION_STEP = 1e-4
"""Resolution of a ``gpu_memory_utilization`` bound (rounded up to it)."""


@dataclass(frozen=True)
class ConfigurationBound:
    """The smallest value of ``knob`` at which the engine starts.

    ``value`` is blocks (``num_gpu_blocks``, the null block included) or a fraction of
    GPU memory (``gpu_memory_utilization``); ``max_model_len`` is tokens;
    ``blocks_per_request`` the blocks one ``max_model_len`` request needs over all KV
    cache groups (the null block not included).
    """

    knob: str
    value: float
    max_model_len: int
    blocks_per_request: int


def engine_starts(plan: PlanSpec, engine: EngineConfig) -> bool:
    """True when the KV budget of ``engine`` (the plan's model and GPU) leaves room for
    one ``max_model_len`` request, i.e. vLLM would start; False on a configuration
    error (:class:`calibrate.budget.KVBudgetError`, a ValueError)."""
    _, model, gpu, budget_fn = budget_inputs(
        None, plan.model, plan.gpu, engine.tensor_parallel_size
    )
    try:
        budget_fn(model, gpu, engine)
    except ValueError:
        return False
    return True


def configuration_bound(
    plan: PlanSpec, resolved: ResolvedRun, high: float
) -> ConfigurationBound | None:
    """The configuration bound of the plan's KV knob, searched up to ``high`` (a value
    at which the engine is known or checked to start); None for knobs without one
    (``max_num_seqs``) and when the engine does not start even at ``high``."""
    field = KNOB_FIELD.get(plan.knob)
    if field is None:
        return None
    integer = plan.knob == "num_gpu_blocks"

    def starts(value: float) -> bool:
        update = {field: int(value) if integer else float(value)}
        return engine_starts(plan, plan.engine.model_copy(update=update))

    if not starts(high):
        return None
    if integer:
        lo, hi = 1, int(high)  # 1 block (the null block alone) never starts
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if starts(mid) else (mid, hi)
        value = float(hi)
    else:
        lo_f, hi_f = 0.0, float(high)
        while hi_f - lo_f > UTILIZATION_STEP / 2:
            mid_f = (lo_f + hi_f) / 2
            lo_f, hi_f = (lo_f, mid_f) if starts(mid_f) else (mid_f, hi_f)
        value = min(float(high), math.ceil(hi_f / UTILIZATION_STEP) * UTILIZATION_STEP)
        value = round(value, 4)
        if not starts(value):
            value = hi_f
    groups = resolved.kv_cache_config.kv_cache_groups
    in_flight = max_in_flight_tokens(resolved.max_num_batched_tokens)
    return ConfigurationBound(
        knob=plan.knob,
        value=value,
        max_model_len=resolved.max_model_len,
        blocks_per_request=blocks_per_request(groups, resolved.max_model_len, in_flight),
    )
