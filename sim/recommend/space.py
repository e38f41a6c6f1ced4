"""The candidates of a recommend spec: every combination of the search space's axes.

A candidate is one replica's configuration: a GPU and an engine (tensor-parallel
size, max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, KV cache dtype,
prefix caching on top of the spec's base ``engine``). Its ``key`` names it in tables;
its configuration hash (:func:`config_hash`) names its cache directory.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from calibrate.catalog import load_gpu, load_model
from kvcore import __version__
from sim.app.engine_config import EngineConfig
from sim.recommend.spec import DEFAULT_TP_SIZES, RecommendSpec

AXES = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "kv_cache_dtype",
    "enable_prefix_caching",
)
"""The engine axes of the space besides the tensor-parallel size (EngineConfig names)."""


@dataclass(frozen=True)
class Candidate:
    """One replica configuration. ``engine`` is None when the combination is not a
    valid engine configuration (``error`` says why)."""

    gpu: str
    tensor_parallel_size: int
    settings: tuple[tuple[str, Any], ...]
    engine: EngineConfig | None
    error: str | None = None
    gpu_source: str = ""
    """The GPU as the spec names it (a catalog name or a GPU YAML path); ``gpu`` is
    its name."""

    @property
    def gpu_arg(self) -> str:
        """What runs are given as their GPU."""
        return self.gpu_source or self.gpu

    @property
    def key(self) -> str:
        """A short unique name: ``H100-SXM tp4 seqs=256 ...`` (the axes the space
        varies or sets)."""
        parts = [self.gpu, f"tp{self.tensor_parallel_size}"]
        short = {
            "max_num_seqs": "seqs",
            "max_num_batched_tokens": "mbt",
            "gpu_memory_utilization": "util",
            "kv_cache_dtype": "kv",
            "enable_prefix_caching": "prefix",
        }
        for name, value in self.settings:
            if isinstance(value, bool):
                value = "on" if value else "off"
            parts.append(f"{short[name]}={value}")
        return " ".join(parts)


def tp_sizes(spec: RecommendSpec) -> list[int]:
    """The tensor-parallel sizes to try: the space's, else 1, 2, 4, 8."""
    return list(spec.space.tensor_parallel_size or DEFAULT_TP_SIZES)


def heads_allow(model_name: str, tp: int) -> str | None:
    """Why vLLM refuses ``tp`` for the model (its attention heads must divide evenly),
    or None when it does not."""
    model = load_model(model_name)
    if model.num_attention_heads % tp:
        return (
            f"tensor_parallel_size {tp} does not divide the model's "
            f"{model.num_attention_heads} attention heads"
        )
    return None


def expand(spec: RecommendSpec) -> list[Candidate]:
    """Every candidate of the space, in a fixed order (GPU, TP, then the axes)."""
    axes = [(name, getattr(spec.space, name)) for name in AXES]
    given = [(name, values) for name, values in axes if values is not None]
    base = spec.engine.model_dump()
    out = []
    for gpu in spec.space.gpus:
        gpu_name = load_gpu(gpu).name
        for tp in tp_sizes(spec):
            for combo in itertools.product(*(values for _, values in given)):
                settings = tuple((name, value) for (name, _), value in zip(given, combo))
                data = {**base, "tensor_parallel_size": tp, **dict(settings)}
                try:
                    engine, error = EngineConfig.model_validate(data), None
                except ValidationError as e:
                    first = e.errors()[0]
                    where = ".".join(str(p) for p in first["loc"])
                    engine, error = None, f"{where}: {first['msg']}"
                out.append(Candidate(gpu_name, tp, settings, engine, error, gpu))
    return out


def config_hash(
    candidate: Candidate, spec: RecommendSpec, workload: dict[str, Any], extra: dict[str, Any]
) -> str:
    """A 16-hex-digit hash of everything a candidate's search depends on: kvsim's
    version, the model's and GPU's figures, the engine, the workload spec, the SLOs and
    the search settings (``extra``: its range). Prices are left out: they do not change
    what is simulated (nor does the GPU's host link without a CPU KV tier)."""
    assert candidate.engine is not None
    # The host link matters only with a CPU KV tier (hashes without one are unchanged).
    unused = set() if candidate.engine.kv_offloading_size is not None else {"host_link_gbps"}
    gpu = load_gpu(candidate.gpu_arg).model_dump(
        mode="json", exclude={"price_per_gpu_hour", *unused}
    )
    doc = {
        "kvsim_version": __version__,
        "model": load_model(spec.model).model_dump(mode="json"),
        "gpu": gpu,
        "engine": candidate.engine.model_dump(mode="json"),
        "workload": workload,
        "slo": spec.slo.bounds(),
        "search": spec.search.model_dump(mode="json"),
        **extra,
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
