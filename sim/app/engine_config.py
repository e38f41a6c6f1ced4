"""Engine configuration: vLLM's engine-argument names and defaults (vLLM 0.33.0).

Loaded from ``--engine FILE`` (YAML) and command-line flags; validated strictly: an
integer field takes only an integer (not ``"16"`` or ``16.0``), a float field a number,
floats must be finite, and values vLLM 0.33.0 refuses are refused here.

``kvsim run``, ``budget``, ``autoscale``, ``calibrate --from-trace`` and a sweep's points
build it through :func:`load_engine_config` (defaults, then the file, then the flags
given, which ``sim.cli.options.engine_flags`` collects); a plan's engine mapping, a
recommend space's and a ``--from-trace`` runs file's are validated inside their own
specs (so their messages name the spec's field). The one frozen object is passed down
whole: the run's setup and the KV budget (``calibrate.budget.engine_kv_budget`` reads
its fields by name), so a field needs no list of keywords in between.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
)
from pydantic_core import PydanticCustomError

from sim.spec_decode.config import SpeculativeSettings, parse_json_object
from workloads.errors import WorkloadError, yaml_problem

BLOCK_SIZE_MULTIPLE = 16
"""vLLM 0.33.0 on CUDA/ROCm takes a ``--block-size`` that some attention backend
supports (``AttentionBackend.supports_block_size``): FLASH_ATTN, TRITON_ATTN,
FLEX_ATTENTION and the MLA backends TRITON_MLA / FLASH_ATTN_MLA take any multiple of
16, FlashInfer 16/32/64 (more on Blackwell), FlashMLA 64, CUTLASS_MLA 128; no backend
takes a size that is not a multiple of 16 (``No valid attention backend found``)."""


_DROPPED_AT_DEFAULT: dict[str, object] = {
    "kv_offloading_size": None,
    "speculative_config": None,
    "data_parallel_size": 1,
    "enable_expert_parallel": False,
    "enforce_eager": False,
}
"""Fields a dump leaves out at these defaults (they came after files and hashes were
written)."""


class EngineConfig(BaseModel):
    """One replica's engine settings. ``None`` means vLLM's default for the GPU/model.

    ``latency_model`` / ``constant_step_s`` are kvsim's own: which step-time model to
    use (``roofline`` from the catalog, or ``constant`` seconds per step).
    """

    model_config = ConfigDict(
        defer_build=True, extra="forbid", frozen=True, strict=True, allow_inf_nan=False
    )

    block_size: int = Field(16, gt=0)
    gpu_memory_utilization: float = Field(0.92, gt=0.0, le=1.0)
    num_gpu_blocks_override: int | None = Field(None, gt=1)
    max_num_seqs: int | None = Field(None, gt=0)
    max_num_batched_tokens: int | None = Field(None, gt=0)
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    prefix_caching_hash_algo: Literal["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"] = "sha256"
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    max_model_len: int | None = Field(None, gt=1)
    tensor_parallel_size: int = Field(1, gt=0)
    data_parallel_size: int = Field(1, gt=0)
    """vLLM's ``--data-parallel-size``: engines that share one MoE model's experts (its
    MoE layers span the ``data_parallel_size * tensor_parallel_size`` GPUs; each engine
    is one of the run's replicas, so the replica count is a multiple of it). A dense
    model's DP ranks are independent engines: then it only sets the replica count."""
    enable_expert_parallel: bool = False
    """vLLM's ``--enable-expert-parallel``: whole experts per rank instead of every
    expert split; the step model counts the same expected bytes either way (kept for
    vLLM's command lines)."""
    enforce_eager: bool = False
    """vLLM's ``--enforce-eager``: no CUDA graphs, so no step is padded to a captured
    size (:mod:`calibrate.cudagraph_sizes`)."""
    long_prefill_token_threshold: int = Field(0, ge=0)
    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    latency_model: Literal["roofline", "constant"] = "roofline"
    constant_step_s: float = Field(0.01, gt=0.0)
    async_scheduling: bool | None = None
    """vLLM's ``--async-scheduling``: None is vLLM 0.33.0's default (on unless an
    incompatible option is set; kvsim models none of them), see
    :func:`uses_async_scheduling`."""
    kv_offloading_size: float | None = Field(None, gt=0.0)
    """vLLM's ``--kv-offloading-size``: the CPU KV offload tier's size in GiB (2**30
    bytes), summed over the tensor-parallel ranks; None: no CPU tier (vLLM's default).
    With a size, vLLM 0.33.0 runs the ``OffloadingConnector`` (``--kv-offloading-backend
    native``, the only backend kvsim models; ``VllmConfig._post_init_kv_transfer_config``)."""
    speculative_config: SpeculativeSettings | None = None
    """vLLM's ``--speculative-config`` (a JSON object; a mapping in a file): method,
    ``num_speculative_tokens``, the draft ``model``, and kvsim's acceptance knobs
    (:mod:`sim.spec_decode.config`); None: no speculative decoding (vLLM's default)."""

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        """Fields as pydantic dumps them, without those of :data:`_DROPPED_AT_DEFAULT`
        at their defaults: every file and hash written from an engine without a CPU
        tier, speculative decoding or data parallelism stays as it was before the fields
        existed (a dump read back gives the same config)."""
        data = handler(self)
        if isinstance(data, dict):
            for name, default in _DROPPED_AT_DEFAULT.items():
                if name in data and data[name] == default:
                    del data[name]
        return data

    @field_validator("speculative_config", mode="before")
    @classmethod
    def _speculative_json(cls, value: Any) -> Any:
        """``--speculative-config`` gives JSON text; a file gives a mapping."""
        return parse_json_object(value)

    @field_validator("speculative_config")
    @classmethod
    def _speculative_off(cls, value: SpeculativeSettings | None) -> SpeculativeSettings | None:
        """``num_speculative_tokens: 0`` (a sweep's baseline) is no speculative decoding:
        the same engine, and the same files, as without the key."""
        return value if value is not None and value.enabled else None

    @field_validator("block_size")
    @classmethod
    def _block_size(cls, value: int) -> int:
        if value % BLOCK_SIZE_MULTIPLE:
            raise PydanticCustomError(
                "block_size",
                "must be a multiple of {multiple} (16, 32, 64, 128, ...: the sizes vLLM "
                "0.33.0's attention backends support) (got {got})",
                {"multiple": BLOCK_SIZE_MULTIPLE, "got": value},
            )
        return value

    @field_validator("max_num_batched_tokens")
    @classmethod
    def _batched_tokens(cls, value: int | None, info: ValidationInfo) -> int | None:
        """vLLM 0.33.0's ``SchedulerConfig.verify_max_model_len``: at least
        ``max_num_seqs`` tokens per step (checked here when both are given; the
        KV budget checks it against the GPU's default ``max_num_seqs``)."""
        seqs = info.data.get("max_num_seqs")
        if value is not None and seqs is not None and value < seqs:
            raise PydanticCustomError(
                "batched_tokens_below_seqs",
                "must be >= max_num_seqs ({seqs}), as vLLM 0.33.0 requires (got {got})",
                {"seqs": seqs, "got": value},
            )
        return value


def uses_async_scheduling(engine: EngineConfig) -> bool:
    """Whether the engine runs vLLM 0.33.0's async-scheduling loop.

    vLLM 0.33.0 (``VllmConfig``, async_scheduling unset) turns it on unless the model is
    a pooling model, pipeline parallelism is used, the speculative method does not
    support it, or the executor backend does not: none of these exists in kvsim (every
    speculative method kvsim models supports it with vLLM's default V2 model runner;
    with the V1 runner, which kvsim does not model, ``ngram`` would turn it off), so it
    is on unless ``async_scheduling`` is False (``--no-async-scheduling``).
    """
    return engine.async_scheduling is not False


def engine_loop(engine: EngineConfig, connector: str | None = None) -> str:
    """The engine-core loop a run uses, as ``config.yaml`` records it; ``connector``:
    the KV connector the replicas run (``OffloadingConnector``, ``NixlConnector``) or
    None, named for the async loop (its worker side runs once per batch)."""
    if uses_async_scheduling(engine):
        loop = "async scheduling: AsyncScheduler, batch queue of 2 (step_with_batch_queue)"
        if connector is not None:
            loop += f"; {connector} worker side per batch, reported with its output"
        return loop
    return "synchronous: Scheduler (EngineCore.step)"


def format_validation_error(source: str, err: ValidationError) -> str:
    """One line: ``source: field: problem`` for the first error pydantic reports."""
    first = err.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "(top level)"
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        nested = first["loc"][0] == "speculative_config" and len(first["loc"]) > 1
        allowed = ", ".join((SpeculativeSettings if nested else EngineConfig).model_fields)
        msg = f"unknown key; allowed: {allowed}"
    elif first["type"] == "literal_error":
        msg = f"{msg} (got {first.get('input')!r})"
    msg = msg.removeprefix("Value error, ")
    if first["loc"] and first["loc"][0] == "speculative_config" and source == "engine flags":
        # A --speculative-config JSON: name the flag and the key inside it.
        inner = ".".join(str(p) for p in first["loc"][1:])
        return f"--speculative-config: {inner + ': ' if inner else ''}{msg}"
    return f"{source}: {field}: {msg}"


def _engine_file(path: str) -> dict[str, Any]:
    """The mapping of engine arguments in YAML file ``path``; ValueError naming the file
    (and the line of a syntax error) when it cannot be read or is not a mapping."""
    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"{path}: cannot read engine file: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{path}: not UTF-8 text (byte {e.start}): an engine file is YAML"
        ) from None
    except yaml.YAMLError as e:
        raise ValueError(str(WorkloadError(path, *yaml_problem(e)))) from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ValueError(f"{path}: expected a mapping of engine arguments")
    return loaded or {}


def load_engine_config(
    path: str | None,
    overrides: dict[str, Any],
    defaults: dict[str, Any] | None = None,
    *,
    checked: bool = True,
) -> EngineConfig:
    """Engine settings from ``defaults`` (e.g. a calibration file's tensor-parallel
    size), then a YAML file, then flags (flags win; a None flag was not given).
    ValueError on bad input.

    ``checked=False`` skips the model's validation: for ``kvsim budget``, whose values
    the KV budget checks itself (``calibrate.budget.compute_kv_budget``, with its own
    messages; it takes block sizes and KV cache dtypes a run refuses). The
    ``speculative_config`` JSON, which nothing else checks, is parsed and checked as a
    run's is even then."""
    data: dict[str, Any] = dict(defaults or {})
    source = "engine flags"
    if path is not None:
        source = path
        data.update(_engine_file(path))
    data.update({k: v for k, v in overrides.items() if v is not None})
    if not checked:
        if data.get("speculative_config") is not None:
            spec = load_engine_config(None, {"speculative_config": data["speculative_config"]})
            data["speculative_config"] = spec.speculative_config
        return EngineConfig.model_construct(**data)
    try:
        return EngineConfig(**data)
    except ValidationError as e:
        raise ValueError(format_validation_error(source, e)) from None
