"""Fewer layers of a model, for quick calibration runs (pure pydantic, no torch)."""

from __future__ import annotations

from calibrate.model_spec import ModelSpec


def reduce_layers(spec: ModelSpec, num_layers: int) -> ModelSpec:
    """``spec`` with its first ``num_layers`` layers, keeping every attention kind present
    (the last layers are swapped for missing kinds), for quick runs."""
    if num_layers >= spec.num_layers:
        return spec
    kinds = list(spec.layer_types[:num_layers])
    missing = [k for k in dict.fromkeys(spec.layer_types) if k not in kinds]
    for i, kind in enumerate(missing[:num_layers]):
        kinds[num_layers - 1 - i] = kind
    dense = min(spec.first_k_dense_replace, max(0, num_layers - 1)) if spec.is_moe else 0
    return spec.model_copy(
        update={
            "num_layers": num_layers,
            "layer_types": tuple(kinds),
            "first_k_dense_replace": dense,
        }
    )
