"""kvsim's KV block budget against real vLLM start-ups, row by row and term by term.

The data is the llm-d planner campaign's ``results_raw.csv`` (real ``vllm serve`` v0.19.0
start-ups on H100-80GB, copied under ``tests/data/llmd_memory/``): per GPU, the weights,
the activation peak of the profiling run, the non-torch growth, the CUDA-graph estimate
and the KV cache vLLM allocated. Each start-up that succeeded is recomputed with
``calibrate.budget.compute_kv_budget`` on the catalog's H100-SXM (79.19 GiB, as the
dataset reports), the row's ``gpu_memory_utilization``, ``max_model_len``, dtype,
quantization and KV dtype, and vLLM 0.19.0's ``vllm serve`` batch defaults on an H100
(8192 batched tokens, 1024 sequences: ``vllm/engine/arg_utils.py:
EngineArgs.get_batch_defaults``).

vLLM 0.19.0 does not take the CUDA-graph estimate from the KV cache (the environment
variable ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaulted to off before 0.21; the
dataset's KV memory is ``requested - weights - activation - non-torch`` to the rounding of
its columns), so the budget is computed with ``cudagraph_memory_bytes=0``; kvsim's graph
estimate is still reported next to the measured estimate.

Units: memory terms in GiB per GPU; errors in percent, signed, ``(kvsim - measured) /
measured``.
"""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from rich.table import Table

from calibrate.budget import KVBudgetError, compute_kv_budget
from calibrate.budget_terms import cudagraph_estimate_bytes
from calibrate.catalog import load_gpu
from calibrate.gpu_spec import GIB
from calibrate.hf_config import model_spec_from_hf_config
from calibrate.model_spec import ModelSpec

GPU = "H100-SXM"
MAX_NUM_BATCHED_TOKENS = 8192  # vLLM 0.19 `vllm serve` default on a >= 70 GiB non-A100 GPU
MAX_NUM_SEQS = 1024
BLOCK_SIZE = 16

_DTYPES = {"torch.bfloat16": "bfloat16", "torch.float16": "float16", "torch.float32": "float32"}
# Architectures whose weights kvsim's parameter count does not describe.
_UNCOUNTED = {
    "PhiForCausalLM": "architecture kvsim does not count (two-matrix MLP, LayerNorm, biases)",
}
# vLLM's resolved quantization (the CSV's column) -> what kvsim counts.
_QUANT_WEIGHT_DTYPE = {"None": None, "fp8": "fp8"}
_QUANT_FROM_CONFIG = {"compressed-tensors", "gptq_marlin"}


class MemoryTerms(NamedTuple):
    """One start-up's memory terms, GiB per GPU."""

    weights: float
    activation: float
    non_torch: float
    cudagraph: float
    kv: float


@dataclass(frozen=True)
class MemoryRow:
    """One dataset start-up: the configuration, measured and kvsim terms and blocks.

    ``skipped`` names why kvsim cannot express the row (then ``kvsim`` is None)."""

    model: str
    tp: int
    pp: int
    dtype: str
    quantization: str
    kv_cache_dtype: str
    max_model_len: int
    gpu_memory_utilization: float
    measured: MemoryTerms
    measured_blocks: int
    kvsim: MemoryTerms | None = None
    kvsim_blocks: int | None = None
    skipped: str | None = None

    @property
    def error_pct(self) -> float | None:
        """Signed error of kvsim's block count, percent of the measured count."""
        if self.kvsim_blocks is None:
            return None
        return 100.0 * (self.kvsim_blocks - self.measured_blocks) / self.measured_blocks


@dataclass(frozen=True)
class MemoryValidation:
    """All rows plus the summary over the expressible ones (``count`` of them)."""

    rows: tuple[MemoryRow, ...]
    count: int
    median_abs_error_pct: float
    max_abs_error_pct: float

    @property
    def skipped(self) -> tuple[MemoryRow, ...]:
        return tuple(r for r in self.rows if r.skipped is not None)


def _float(row: dict[str, str], key: str) -> float:
    value = row.get(key, "")
    return float(value) if value else 0.0


def _measured(row: dict[str, str]) -> MemoryTerms:
    return MemoryTerms(
        weights=_float(row, "weight_memory_gib"),
        activation=_float(row, "activation_memory_gib"),
        non_torch=_float(row, "non_torch_forward_gib"),
        cudagraph=_float(row, "cuda_graph_estimated_gib"),
        kv=_float(row, "kv_cache_memory_gib"),
    )


def config_file(configs_dir: Path, model: str) -> Path:
    """Where the trimmed ``config.json`` of ``model`` (``org/name``) lives."""
    return configs_dir / (model.replace("/", "--") + ".json")


def _model_spec(row: dict[str, str], configs_dir: Path) -> ModelSpec | str:
    """The row's model as vLLM ran it, or why kvsim cannot express it."""
    quant = row["quantization"]
    if quant not in _QUANT_WEIGHT_DTYPE and quant not in _QUANT_FROM_CONFIG:
        return f"quantization {quant} kvsim does not count"
    path = config_file(configs_dir, row["model"])
    if not path.is_file():
        return "no config.json facts collected for this model"
    raw = json.loads(path.read_text(encoding="utf-8"))
    arch = (raw.get("architectures") or [""])[0]
    if arch in _UNCOUNTED:
        return _UNCOUNTED[arch]
    spec = model_spec_from_hf_config(raw, row["model"])
    if quant in _QUANT_FROM_CONFIG and spec.weight_dtype is None and spec.weight_bits is None:
        return f"quantization {quant}: config.json's quantization_config not counted"
    update: dict[str, object] = {"dtype": _DTYPES[row["dtype"]]}
    if quant in _QUANT_WEIGHT_DTYPE and _QUANT_WEIGHT_DTYPE[quant] is not None:
        update["weight_dtype"] = _QUANT_WEIGHT_DTYPE[quant]
    return spec.model_copy(update=update)


def _row(row: dict[str, str], configs_dir: Path) -> MemoryRow:
    tp, pp = int(row["tp"]), int(row["pp"])
    base = {
        "model": row["model"],
        "tp": tp,
        "pp": pp,
        "dtype": row["dtype"].removeprefix("torch."),
        "quantization": row["quantization"],
        "kv_cache_dtype": row["kv_cache_dtype"],
        "max_model_len": int(row["max_model_len"]),
        "gpu_memory_utilization": float(row["gpu_memory_utilization"]),
        "measured": _measured(row),
        "measured_blocks": int(row["kv_cache_blocks"]),
    }
    if pp > 1:
        return MemoryRow(**base, skipped="pipeline parallel: kvsim's budget has no stages")
    spec = _model_spec(row, configs_dir)
    if isinstance(spec, str):
        return MemoryRow(**base, skipped=spec)
    gpu = load_gpu(GPU)
    try:
        budget = compute_kv_budget(
            spec,
            gpu,
            tensor_parallel_size=tp,
            gpu_memory_utilization=base["gpu_memory_utilization"],
            max_model_len=base["max_model_len"],
            max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
            max_num_seqs=MAX_NUM_SEQS,
            block_size=BLOCK_SIZE,
            kv_cache_dtype=row["kv_cache_dtype"],
            cudagraph_memory_bytes=0,
        )
    except KVBudgetError as exc:
        return MemoryRow(**base, skipped=f"kvsim refuses it: {exc}")
    kvsim = MemoryTerms(
        weights=budget.weights_bytes / GIB,
        activation=budget.activation_peak_bytes / GIB,
        non_torch=budget.non_torch_bytes / GIB,
        cudagraph=cudagraph_estimate_bytes(spec, tp) / GIB,
        kv=budget.available_kv_bytes / GIB,
    )
    return MemoryRow(**base, kvsim=kvsim, kvsim_blocks=budget.num_gpu_blocks)


def validate_memory(csv_path: Path, configs_dir: Path) -> MemoryValidation:
    """Every successful start-up of ``csv_path`` recomputed with kvsim's budget, with
    the models' trimmed ``config.json`` files from ``configs_dir``."""
    with csv_path.open(encoding="utf-8", newline="") as f:
        raw = [r for r in csv.DictReader(f) if r["status"] == "ok"]
    rows = tuple(_row(r, configs_dir) for r in raw)
    errors = [abs(e) for r in rows if (e := r.error_pct) is not None]
    return MemoryValidation(
        rows=rows,
        count=len(errors),
        median_abs_error_pct=statistics.median(errors) if errors else float("nan"),
        max_abs_error_pct=max(errors) if errors else float("nan"),
    )


def _pair(measured: float, kvsim: float | None) -> str:
    return f"{measured:.2f}" if kvsim is None else f"{measured:.2f} / {kvsim:.2f}"


def memory_table(v: MemoryValidation) -> Table:
    """The validation as a table: measured / kvsim per term (GiB per GPU), blocks and the
    signed block error; skipped rows say why."""
    table = Table(
        title=(
            f"KV budget vs vLLM 0.19 start-ups (H100-80GB): {v.count} rows, median "
            f"|error| {v.median_abs_error_pct:.2f}%, max {v.max_abs_error_pct:.2f}%"
        ),
        caption="memory columns: measured / kvsim, GiB per GPU",
    )
    for name in ("model", "tp", "pp", "dtype", "quant", "kv", "weights", "activation"):
        table.add_column(name)
    for name in ("non-torch", "cuda graph", "KV GiB", "blocks", "error"):
        table.add_column(name, justify="right")
    for r in v.rows:
        k = r.kvsim
        terms = [_pair(m, None if k is None else k[i]) for i, m in enumerate(r.measured)]
        blocks = (
            f"{r.measured_blocks} / {r.kvsim_blocks}"
            if r.kvsim_blocks is not None
            else str(r.measured_blocks)
        )
        err = r.error_pct
        table.add_row(
            r.model,
            str(r.tp),
            str(r.pp),
            r.dtype,
            r.quantization,
            r.kv_cache_dtype,
            *terms,
            blocks,
            f"{err:+.2f}%" if err is not None else f"skipped: {r.skipped}",
        )
    return table
