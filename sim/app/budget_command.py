"""``kvsim budget``: the KV block budget of one GPU and every term it comes from.

Bad input (unknown model or GPU, a bad catalog file, an impossible configuration) prints
one message naming the field on stderr and exits 2, as every kvsim command does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from calibrate.budget import KVBudget
from calibrate.gpu_spec import GIB
from calibrate.use_calibration import budget_inputs, calibration_defaults
from sim.app.engine_config import load_engine_config
from sim.defaults import DEFAULT_GPU, DEFAULT_MODEL

PRESET_DIR = Path(__file__).resolve().parent.parent / "workloads" / "presets"


def _fail(message: str) -> int:
    print(f"kvsim: error: {message}", file=sys.stderr)
    return 2


def _gib(value: int) -> str:
    return f"{value / GIB:,.2f} GiB"


def _budget_table(b: KVBudget) -> Table:
    table = Table(title=f"KV budget: {b.model} on {b.gpu} (TP {b.tensor_parallel_size}, per GPU)")
    table.add_column("term")
    table.add_column("value", justify="right")
    table.add_column("bytes", justify="right")
    mem_rows = [
        ("total GPU memory", b.total_memory_bytes),
        (f"x gpu_memory_utilization {b.gpu_memory_utilization}", b.requested_memory_bytes),
        ("- weights", b.weights_bytes),
        *(
            [(f"  (of which draft model {b.draft_model})", b.draft_weights_bytes)]
            if b.draft_model
            else []
        ),
        (
            f"- activation peak ({b.max_num_batched_tokens} tokens, "
            f"{min(b.max_num_batched_tokens, b.max_num_seqs)} seqs)",
            b.activation_peak_bytes,
        ),
        ("- non-torch reserve", b.non_torch_bytes),
        ("- CUDA graphs", b.cudagraph_bytes),
        ("= available for KV cache", b.available_kv_bytes),
    ]
    for label, value in mem_rows:
        table.add_row(label, _gib(value), f"{value:,}")
    table.add_row(
        f"bytes per block ({b.block_size} tokens, {b.kv_cache_dtype}, "
        f"{b.num_kv_cache_groups} group(s))",
        "",
        f"{b.bytes_per_block:,}",
    )
    override = " (override)" if b.num_gpu_blocks_override is not None else ""
    table.add_row(f"num_gpu_blocks{override}", f"{b.num_gpu_blocks:,}", "")
    table.add_row("KV cache size (tokens)", f"{b.kv_cache_size_tokens:,}", "")
    table.add_row(
        f"max concurrency at max_model_len {b.max_model_len:,}", f"{b.max_concurrency:.2f}x", ""
    )
    return table


def budget_command(
    model: str | None,
    gpu: str | None,
    engine_flags: dict[str, Any],
    calibration: str | None = None,
    as_json: bool = False,
) -> int:
    """Print the budget (rich table, or one JSON object); return the exit status.

    ``engine_flags``: the engine flags given (``EngineConfig`` field -> value, None when
    not given; :func:`sim.cli.options.engine_flags`). ``model``, ``gpu`` and
    ``tensor_parallel_size`` left out (None) are the calibration file's when there is
    one, else the defaults (Llama-3.1-8B, H100-SXM, 1). The values are checked by the
    budget itself (``calibrate.budget.compute_kv_budget``, its messages), not as a run's
    engine file is."""
    try:
        from_file = calibration_defaults(calibration) if calibration else {}
        model = model or from_file.get("model") or DEFAULT_MODEL
        gpu = gpu or from_file.get("gpu") or DEFAULT_GPU
        tp = engine_flags.get("tensor_parallel_size") or from_file.get("tensor_parallel_size") or 1
        engine = load_engine_config(
            None, {**engine_flags, "tensor_parallel_size": tp}, checked=False
        )
        _, spec, hw, budget_fn = budget_inputs(calibration, model, gpu, tp)
        budget = budget_fn(spec, hw, engine)
    except ValueError as exc:  # CatalogError, KVBudgetError and kvcore's checks
        return _fail(str(exc))
    if as_json:
        print(json.dumps(budget.to_dict(), sort_keys=True))
    else:
        Console().print(_budget_table(budget))
    return 0
