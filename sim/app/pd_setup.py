"""Each P/D pool's own resolved run, when ``--pd FILE.yaml`` gives it a GPU or engine
arguments of its own (:mod:`sim.app.pd_config`).

A pool's run is the run's spec with the pool's GPU and its engine arguments laid over
the run's, resolved as any run is (its KV budget, step-time model, limits); the
workload stays the run's. Both pools must lay KV out alike (one model, block size
and KV cache dtype: a read copies block for block) and take the same max_model_len,
else ValueError. Their tensor-parallel sizes may differ when one divides the other, as
vLLM 0.33.0's NIXL connector requires (``TpKVTopology.tp_ratio``): with more decode
ranks, each decode rank reads its slice of a prefill rank's heads; with more prefill
ranks, each decode rank reads from several prefill ranks. Either way every rank moves
its own shard at the same time, so a read takes as long as the side that moves more
bytes per rank (:func:`pool_layout`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import ValidationError

from calibrate.catalog import load_gpu
from sim.app.engine_config import EngineConfig, format_validation_error
from sim.app.kv_offload import worker_kv_bytes_per_block
from sim.app.pd_config import PDSpec, check_pd_run

_SAME = ("block_size", "kv_cache_dtype")


def pool_runs(pd: PDSpec, spec: Any, base: Any) -> dict[str, Any]:
    """``{"prefill": run, "decode": run}`` for the pools with settings of their own
    (a pool without is the base run ``base``); ValueError naming ``--pd``, the pool
    and the field."""
    from sim.app.setup import resolve_run  # (sim.app.setup calls this module)

    out: dict[str, Any] = {}
    for role, gpu, overrides in (
        ("prefill", pd.prefill_gpu, pd.prefill_engine),
        ("decode", pd.decode_gpu, pd.decode_engine),
    ):
        if gpu is None and not overrides:
            continue
        try:
            engine = EngineConfig(**{**base.engine.model_dump(), **overrides})
        except ValidationError as e:
            raise ValueError(format_validation_error(f"--pd: {role}.engine", e)) from None
        pool_spec = dataclasses.replace(
            spec, gpu=gpu or spec.gpu, engine=engine, pd=None, num_replicas=1
        )
        try:
            run = resolve_run(pool_spec, allow_large=True)
        except ValueError as e:
            raise ValueError(f"--pd: the {role} pool: {e}") from None
        try:
            check_pd_run(
                base.pd,
                offload=run.offload is not None,
                spec_decode=run.spec is not None,
            )
        except ValueError as e:
            raise ValueError(f"{e} (the {role} pool's engine)") from None
        for name in _SAME:
            if getattr(run.engine, name) != getattr(base.engine, name):
                raise ValueError(
                    f"--pd: {role}.engine.{name}: both pools need the same {name} (the KV "
                    f"layout a read copies), got {getattr(run.engine, name)!r} against "
                    f"{getattr(base.engine, name)!r}"
                )
        if run.max_model_len != base.max_model_len:
            raise ValueError(
                f"--pd: {role}: both pools need the same max_model_len, got "
                f"{run.max_model_len} against {base.max_model_len} (set engine.max_model_len)"
            )
        same_tp = run.engine.tensor_parallel_size == base.engine.tensor_parallel_size
        per_block = worker_kv_bytes_per_block(run.kv_cache_config)
        if same_tp and per_block != worker_kv_bytes_per_block(base.kv_cache_config):
            raise ValueError(f"--pd: {role}: its KV blocks differ in size from the other pool's")
        out[role] = run
    return out


def pool_layout(runs: dict[str, Any], base: Any) -> dict[str, int]:
    """The :class:`sim.app.pd_config.PDSetup` fields of the pools' KV layouts
    (``worker_kv_bytes_per_block``, ``world_size``, ``moved_bytes_per_block``; see
    the module) from each pool's run (``runs``, else ``base``); ValueError naming
    ``--pd`` when neither tensor-parallel size divides the other."""
    prefill, decode = (runs.get(role, base) for role in ("prefill", "decode"))
    tp_p = prefill.engine.tensor_parallel_size
    tp_d = decode.engine.tensor_parallel_size
    if max(tp_p, tp_d) % min(tp_p, tp_d):
        raise ValueError(
            f"--pd: tensor_parallel_size: the prefill pool's ({tp_p}) and the decode pool's "
            f"({tp_d}) must divide one another (vLLM's NIXL connector maps ranks by their "
            "ratio)"
        )
    per_rank_p = worker_kv_bytes_per_block(prefill.kv_cache_config)
    per_rank_d = worker_kv_bytes_per_block(decode.kv_cache_config)
    return {
        "worker_kv_bytes_per_block": max(per_rank_p, per_rank_d),
        "world_size": tp_d,
        "moved_bytes_per_block": per_rank_d * tp_d,
    }


def pool_link(pd: PDSpec, base_gpu: Any) -> tuple[float, float]:
    """The link of the deployment (bytes/s, latency s): the flag's or file's figures,
    else the slower GPU's NIC of the two pools' GPUs (and the longer latency)."""
    gpus = [base_gpu] + [load_gpu(g) for g in (pd.prefill_gpu, pd.decode_gpu) if g is not None]
    rate = min(g.kv_transfer_bytes_per_s for g in gpus)
    latency = max(g.kv_transfer_latency_s for g in gpus)
    if pd.kv_transfer_gbps is not None:
        rate = pd.kv_transfer_gbps * 1e9
    if pd.kv_transfer_latency_us is not None:
        latency = pd.kv_transfer_latency_us * 1e-6
    return rate, latency
