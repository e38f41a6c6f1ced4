"""Options shared by the ``kvsim`` commands: engine flags with their vLLM meaning and
defaults, and how a command tells a flag it was given from one left at its default.

Every option shows a help line and its default in ``--help``
(``tests/test_cli_help.py`` walks them). A flag that overrides a file (``--engine``,
a plan YAML) shows the value that applies when neither gives it, and the command
passes on only the flags given on the command line (:func:`given`), so a file's value
is never replaced by a flag's default.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from sim.app.engine_config import EngineConfig
from sim.defaults import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_WORKLOAD

ENGINE_FLAGS: dict[str, tuple[str, str]] = {
    "block_size": ("--block-size", "tokens per KV cache block (a multiple of 16)"),
    "gpu_memory_utilization": (
        "--gpu-memory-utilization",
        "fraction of GPU memory the engine may use: weights, activations, KV cache",
    ),
    "num_gpu_blocks_override": (
        "--num-gpu-blocks-override",
        "use this many KV blocks instead of what the memory budget gives",
    ),
    "max_num_seqs": ("--max-num-seqs", "most requests running in one engine step"),
    "max_num_batched_tokens": (
        "--max-num-batched-tokens",
        "most tokens, prefill and decode, scheduled in one engine step",
    ),
    "max_model_len": (
        "--max-model-len",
        "context length in tokens: a longer prompt is rejected, an output stops there",
    ),
    "tensor_parallel_size": (
        "--tensor-parallel-size",
        "GPUs one replica's model is split over (the budget is per GPU)",
    ),
    "data_parallel_size": (
        "--data-parallel-size",
        "engines (replicas) sharing one MoE model's experts over DP x TP GPUs; a dense "
        "model's DP ranks are independent replicas",
    ),
    "enable_expert_parallel": (
        "--enable-expert-parallel/--no-enable-expert-parallel",
        "whole experts per GPU instead of each expert split (same modelled bytes)",
    ),
    "enforce_eager": (
        "--enforce-eager/--no-enforce-eager",
        "no CUDA graphs: steps run unpadded (vLLM pads a step to its graph's size)",
    ),
    "long_prefill_token_threshold": (
        "--long-prefill-token-threshold",
        "prefill at most this many tokens of one request per step; 0: no cap",
    ),
    "enable_chunked_prefill": (
        "--enable-chunked-prefill/--no-enable-chunked-prefill",
        "split a long prompt's prefill over steps to fill max_num_batched_tokens",
    ),
    "enable_prefix_caching": (
        "--enable-prefix-caching/--no-enable-prefix-caching",
        "reuse the KV blocks of a prompt prefix that is already cached",
    ),
    "scheduling_policy": (
        "--scheduling-policy",
        "fcfs: arrival order; priority: lowest priority value first, ties by arrival",
    ),
    "kv_cache_dtype": ("--kv-cache-dtype", "auto: the model's dtype; fp8: one byte per value"),
    "latency_model": (
        "--latency-model",
        "step times: roofline (the catalog GPU's compute and bandwidth) or constant",
    ),
    "constant_step_s": (
        "--constant-step-s",
        "seconds per engine step with --latency-model constant",
    ),
    "async_scheduling": (
        "--async-scheduling/--no-async-scheduling",
        "schedule step N+1 while step N runs (AsyncScheduler, a batch queue of 2)",
    ),
    "kv_offloading_size": (
        "--kv-offloading-size",
        "GiB of CPU memory (over all TP ranks) for offloaded KV blocks: a second prefix "
        "cache tier (vLLM's native OffloadingConnector)",
    ),
    "speculative_config": (
        "--speculative-config",
        "speculative decoding as a JSON object: method (ngram, ngram_gpu, draft_model, "
        "eagle, eagle3), "
        "num_speculative_tokens, model (draft_model's), and kvsim's acceptance_rate "
        "(one or per position) and proposal_rate (ngram); docs/engine.md",
    ),
}
"""Each engine flag (an ``EngineConfig`` field): its option declaration and a one-line
help in vLLM's meaning (``latency_model`` and ``constant_step_s`` are kvsim's own)."""

SLO_FLAGS: dict[str, tuple[str, str]] = {
    "ttft_mean_s": ("--ttft-mean-s", "mean time to first token, seconds"),
    "ttft_p90_s": ("--ttft-p90-s", "p90 time to first token, seconds"),
    "tpot_mean_s": ("--tpot-mean-s", "mean time per output token, seconds"),
    "tpot_p99_s": ("--tpot-p99-s", "p99 time per output token, seconds"),
    "e2e_p99_s": ("--e2e-p99-s", "p99 end-to-end latency, seconds"),
    "max_preemptions_per_request": (
        "--max-preemptions-per-request",
        "preemptions per request, at most",
    ),
}
"""Each SLO flag (a ``sim.records.slo.SLO`` field) of plan, recommend and autoscale: its option
and help."""

ENGINE_PANEL = "Engine (vLLM's engine arguments and defaults)"
WORKLOAD_PANEL = "Workload"
OUTPUT_PANEL = "Output"
TRACE_FIT_PANEL = "Fit to a real run (--from-trace)"

DERIVED_DEFAULTS = {
    "num_gpu_blocks_override": "none: the memory budget's",
    "max_num_seqs": "vLLM's for the GPU: 1024, 256 under 70 GiB and on A100",
    "max_num_batched_tokens": (
        "vLLM's for the GPU: 8192; 16384 from 160 GiB; 2048 under 70 GiB and on A100"
    ),
    "max_model_len": "the model's maximum",
    "async_scheduling": "on, as vLLM 0.33.0 (no option kvsim models turns it off)",
    "kv_offloading_size": "none: no CPU tier",
    "speculative_config": "none: no speculative decoding",
}
"""What a ``None`` engine field resolves to (vLLM 0.33.0's defaults for the OpenAI
server), as ``--help`` shows it."""


def engine_option(field: str, *, help_suffix: str = "") -> Any:
    """The ``typer.Option`` of engine flag ``field``: help from :data:`ENGINE_FLAGS`,
    ``EngineConfig``'s default (or :data:`DERIVED_DEFAULTS`) shown. Read the value
    through :func:`given` so an engine file's value stays unless the flag is given."""
    decl, text = ENGINE_FLAGS[field]
    default = EngineConfig.model_fields[field].default
    shown: bool | str = DERIVED_DEFAULTS[field] if default is None else True
    # A JSON object on the command line (the engine configuration parses it).
    extra: dict[str, Any] = {"metavar": "JSON"} if field == "speculative_config" else {}
    return typer.Option(
        default,
        decl,
        help=text + help_suffix,
        show_default=shown,
        rich_help_panel=ENGINE_PANEL,
        **extra,
    )


def slo_option(field: str) -> Any:
    """The ``typer.Option`` of SLO ``field`` (:data:`SLO_FLAGS`): a bound, none by
    default."""
    flag, text = SLO_FLAGS[field]
    return typer.Option(None, flag, metavar="BOUND", help="SLO: " + text, show_default="none")


def model_option(
    help: str = "catalog model or config.json path",
    default: str | None = DEFAULT_MODEL,
    **extra: Any,
) -> Any:
    """The ``--model`` option: a catalog model name or a Hugging Face ``config.json``
    path; ``help`` says what else the command reads it as."""
    return typer.Option(default, "--model", metavar="NAME|PATH", help=help, **extra)


def gpu_option(
    help: str = "catalog GPU or GPU YAML path", default: str | None = DEFAULT_GPU, **extra: Any
) -> Any:
    """The ``--gpu`` option: a catalog GPU name or a GPU YAML path."""
    return typer.Option(default, "--gpu", metavar="NAME|PATH", help=help, **extra)


def rate_workload_option() -> Any:
    """The ``--workload`` option of the commands that search over an arrival rate
    (``plan``, ``recommend``): a preset or a workload YAML whose rate can be set."""
    return typer.Option(
        DEFAULT_WORKLOAD,
        "--workload",
        metavar="WORKLOAD",
        help="preset or workload YAML with a poisson, gamma or constant arrival",
    )


def calibration_option(help: str, show_default: str) -> Any:
    """The ``--calibration`` option: a file ``kvsim calibrate`` wrote, none by default."""
    return typer.Option(None, "--calibration", metavar="FILE", help=help, show_default=show_default)


def given(ctx: typer.Context, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (parameter name -> value) with ``None`` for every parameter the user
    did not give (its value is the option's default), so it cannot replace a file's."""
    out = {}
    for name, value in values.items():
        source = ctx.get_parameter_source(name)
        out[name] = None if source is None or source.name == "DEFAULT" else value
    return out


def engine_flags(ctx: typer.Context) -> dict[str, Any]:
    """The engine flags of the command ``ctx`` runs: each of its parameters named as an
    :data:`ENGINE_FLAGS` field (an ``EngineConfig`` field), None where not given
    (:func:`given`). What every command hands to ``sim.app.engine_config.load_engine_config``,
    so a flag declared with :func:`engine_option` reaches the engine with no list of
    names in between."""
    return given(ctx, {k: v for k, v in ctx.params.items() if k in ENGINE_FLAGS})


def _hide_flag_types(params: list[Any]) -> None:
    """An on/off flag shows no ``<bool>`` type, as it takes no value."""
    for param in params:
        if getattr(param, "is_flag", False) and getattr(param, "metavar", "") is None:
            param.metavar = ""


class KvsimCommand(TyperCommand):
    """A kvsim command: on/off flags (``--help`` too) show no ``<bool>`` type."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        _hide_flag_types(params)
        return params


class KvsimGroup(TyperGroup):
    """The ``kvsim`` group: as :class:`KvsimCommand`."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        _hide_flag_types(params)
        return params
