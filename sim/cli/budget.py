"""``kvsim budget``: its options (typer); the work is in :mod:`sim.app.budget_command`, imported
when the command runs."""

from __future__ import annotations

import typer

from sim.cli.options import (
    calibration_option,
    engine_flags,
    engine_option,
    given,
    gpu_option,
    model_option,
)


def budget(
    ctx: typer.Context,
    model: str = model_option(
        "catalog model or config.json path; with --calibration: the file's model"
    ),
    gpu: str = gpu_option("catalog GPU or GPU YAML path; with --calibration: the file's GPU"),
    tensor_parallel_size: int = engine_option(
        "tensor_parallel_size", help_suffix="; with --calibration: the file's"
    ),
    data_parallel_size: int = engine_option("data_parallel_size"),
    gpu_memory_utilization: float = engine_option("gpu_memory_utilization"),
    max_model_len: int = engine_option("max_model_len"),
    max_num_batched_tokens: int = engine_option("max_num_batched_tokens"),
    max_num_seqs: int = engine_option("max_num_seqs"),
    block_size: int = engine_option("block_size"),
    kv_cache_dtype: str = engine_option("kv_cache_dtype"),
    num_gpu_blocks_override: int = engine_option("num_gpu_blocks_override"),
    speculative_config: str = engine_option(
        "speculative_config", help_suffix="; here: a draft model's weights and KV"
    ),
    calibration: str = calibration_option(
        "calibration file from kvsim calibrate: its measured memory terms",
        "none: catalog figures",
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """The KV block budget (num_gpu_blocks) per GPU and each term it was derived from."""
    from sim.app.budget_command import budget_command

    named = given(ctx, {"model": model, "gpu": gpu})
    raise typer.Exit(
        budget_command(named["model"], named["gpu"], engine_flags(ctx), calibration, as_json)
    )
