"""Each P/D pool's own resolved run, when ``--pd FILE.yaml`` gives it a GPU or engine
arguments of its own (:mod:`sim.pd_config`).

A pool's run is the run's spec with the pool's GPU and its engine arguments laid over
the run's, resolved as any run is (its KV budget, step-time model, limits); the
workload stays the run's. Both pools must lay KV out alike (one model, block size,
KV cache dtype and tensor-parallel size: a read copies block for block, the same
bytes per block on both sides) and take the same max_model_len, else ValueError.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import ValidationError

from calibrate.catalog import load_gpu
from sim.engine_config import EngineConfig, format_validation_error
from sim.kv_offload import worker_kv_bytes_per_block
from sim.pd_config import PDSpec, check_pd_run

_SAME = ("block_size", "kv_cache_dtype", "tensor_parallel_size")


def pool_runs(pd: PDSpec, spec: Any, base: Any) -> dict[str, Any]:
    """``{"prefill": run, "decode": run}`` for the pools with settings of their own
    (a pool without is the base run ``base``); ValueError naming ``--pd``, the pool
    and the field."""
    from sim.setup import resolve_run  # (sim.setup calls this module)

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
        per_block = worker_kv_bytes_per_block(run.kv_cache_config)
        if per_block != worker_kv_bytes_per_block(base.kv_cache_config):
            raise ValueError(f"--pd: {role}: its KV blocks differ in size from the other pool's")
        out[role] = run
    return out


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
