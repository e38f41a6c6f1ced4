"""How a run asks for prefill/decode disaggregation, and its checks.

``kvsim run WORKLOAD --pd prefill=P,decode=D`` (or ``RunSpec.pd``; either engine
loop) serves the workload with ``P`` prefill instances (vLLM's
``kv_role: kv_producer``) and ``D`` decode instances (``kv_consumer``) of the run's
model, GPU and engine arguments, behind a proxy (:mod:`sim.engine.pd_cluster`). Optional
keys of the same flag: ``kv_transfer_gbps=G`` and ``kv_transfer_latency_us=U``
override the GPU YAML's inter-instance link (e.g. instances on one NVLink node).

``--pd FILE.yaml`` gives each pool its own GPU and engine arguments (over the run's;
vLLM's names), e.g.::

    prefill: {replicas: 1, engine: {max_num_batched_tokens: 16384}}
    decode: {replicas: 3, gpu: H200, engine: {max_num_seqs: 512}}
    kv_transfer_gbps: 50          # optional, as in the flag's text

Both pools serve the run's model with one block size, KV cache dtype and
max_model_len (the KV layout a read copies block for block), else the file is
refused; their tensor-parallel sizes may differ when one divides the other
(:mod:`sim.app.pd_setup`).

Units: GB/s (10**9 bytes/s), microseconds, bytes per block on one TP rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvcore.kv_cache_interface import KVCacheConfig
from kvcore.nixl_connector import NixlConnectorScheduler
from sim.app.kv_offload import worker_kv_bytes_per_block

PD_KEYS = ("prefill", "decode", "kv_transfer_gbps", "kv_transfer_latency_us")
"""The keys ``--pd`` takes."""


@dataclass(frozen=True)
class PDSpec:
    """What the user asked for: pool sizes and, optionally, the link's figures and
    each pool's GPU and engine arguments over the run's (``*_engine``: vLLM names)."""

    num_prefill: int
    num_decode: int
    kv_transfer_gbps: float | None = None
    kv_transfer_latency_us: float | None = None
    prefill_gpu: str | None = None
    decode_gpu: str | None = None
    prefill_engine: dict[str, Any] = field(default_factory=dict)
    decode_engine: dict[str, Any] = field(default_factory=dict)


class _Pool(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", strict=True)

    replicas: int = Field(ge=1)
    gpu: str | None = None
    engine: dict[str, Any] = Field(default_factory=dict)


class _PDFile(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", strict=True)

    prefill: _Pool
    decode: _Pool
    kv_transfer_gbps: float | None = Field(default=None, gt=0)
    kv_transfer_latency_us: float | None = Field(default=None, ge=0)


def _is_file(text: str) -> bool:
    return text.endswith((".yaml", ".yml")) or Path(text).is_file()


def parse_pd_file(path: str) -> PDSpec:
    """A ``--pd`` YAML file (see the module) as a :class:`PDSpec`; ValueError naming
    the file and the field."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"--pd: cannot read {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML ({e.__class__.__name__})") from None
    try:
        f = _PDFile.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        allowed = "prefill, decode, kv_transfer_gbps, kv_transfer_latency_us"
        hint = f" (allowed: {allowed}; per pool: replicas, gpu, engine)"
        raise ValueError(f"{path}: {loc}: {err['msg']}{hint}") from None
    return PDSpec(
        f.prefill.replicas,
        f.decode.replicas,
        f.kv_transfer_gbps,
        f.kv_transfer_latency_us,
        f.prefill.gpu,
        f.decode.gpu,
        dict(f.prefill.engine),
        dict(f.decode.engine),
    )


def parse_pd(text: str) -> PDSpec:
    """``prefill=P,decode=D[,kv_transfer_gbps=G][,kv_transfer_latency_us=U]``, or the
    path of a YAML file (:func:`parse_pd_file`), as a :class:`PDSpec`; ValueError
    naming ``--pd``, the key and the allowed values."""
    if _is_file(text):
        return parse_pd_file(text)
    items: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or key not in PD_KEYS:
            raise ValueError(
                f"--pd: unknown or malformed item {part.strip()!r}; allowed keys: "
                f"{', '.join(PD_KEYS)} (e.g. --pd prefill=1,decode=2)"
            )
        if key in items:
            raise ValueError(f"--pd: {key} given twice")
        items[key] = value.strip()
    for key in ("prefill", "decode"):
        if key not in items:
            raise ValueError(f"--pd: {key}=N is required (e.g. --pd prefill=1,decode=2)")
    counts = {}
    for key in ("prefill", "decode"):
        try:
            counts[key] = int(items[key])
        except ValueError:
            raise ValueError(f"--pd: {key} must be an integer >= 1 (got {items[key]!r})") from None
        if counts[key] < 1:
            raise ValueError(f"--pd: {key} must be an integer >= 1 (got {counts[key]})")
    link: dict[str, float] = {}
    for key in ("kv_transfer_gbps", "kv_transfer_latency_us"):
        if key in items:
            try:
                link[key] = float(items[key])
            except ValueError:
                raise ValueError(f"--pd: {key} must be a number (got {items[key]!r})") from None
    if link.get("kv_transfer_gbps", 1.0) <= 0:
        raise ValueError("--pd: kv_transfer_gbps must be > 0")
    if link.get("kv_transfer_latency_us", 0.0) < 0:
        raise ValueError("--pd: kv_transfer_latency_us must be >= 0")
    return PDSpec(
        counts["prefill"],
        counts["decode"],
        link.get("kv_transfer_gbps"),
        link.get("kv_transfer_latency_us"),
    )


@dataclass(frozen=True)
class PDSetup:
    """A P/D run, resolved. ``worker_kv_bytes_per_block``: one KV block's bytes on one
    TP rank (all layers) of the side that moves more per rank (what the busiest NIC
    carries per block: both sides' ranks move their shards in parallel);
    ``world_size``: TP ranks of a decode instance (each reads its own shard);
    ``moved_bytes_per_block``: one block's bytes over all of a decode instance's ranks
    (what a read moves in all; 0: ``worker_kv_bytes_per_block * world_size``);
    ``link_bytes_per_s`` / ``latency_s``: one rank's NIC, one direction, and the fixed
    cost of one read."""

    num_prefill: int
    num_decode: int
    worker_kv_bytes_per_block: int
    world_size: int
    link_bytes_per_s: float
    latency_s: float
    moved_bytes_per_block: int = 0
    runs: dict[str, Any] = field(default_factory=dict)
    """``prefill`` / ``decode`` -> that pool's own resolved run (:mod:`sim.app.pd_setup`),
    for a pool with a GPU or engine arguments of its own; else the run's."""

    def read_bytes(self, num_blocks: int) -> int:
        """Bytes a read of ``num_blocks`` blocks moves over all of the decode
        instance's ranks."""
        per_block = self.moved_bytes_per_block or self.worker_kv_bytes_per_block * self.world_size
        return num_blocks * per_block

    def run_for(self, role: str, base: Any) -> Any:
        """The resolved run ``role``'s instances are replicas of (``base``: the run's)."""
        return self.runs.get(role, base)

    @property
    def num_instances(self) -> int:
        return self.num_prefill + self.num_decode

    def describe(self, router: str) -> dict[str, Any]:
        """The ``pd`` entry of ``config.yaml`` (``router``: the run's, used per pool)."""
        return {
            "prefill_instances": self.num_prefill,
            "decode_instances": self.num_decode,
            "connector": "NixlConnector (pull: the decode side reads), kv_producer / kv_consumer",
            "proxy": f"prefill instance, then decode instance, each by {router} in its pool",
            "kv_transfer_gbps": self.link_bytes_per_s / 1e9,
            "kv_transfer_latency_us": self.latency_s * 1e6,
            "worker_kv_bytes_per_block": self.worker_kv_bytes_per_block,
            "world_size": self.world_size,
            "fast_forward": "off: every step is stepped, with its transfers",
            **{
                f"{role}_pool": {
                    "gpu": run.gpu_name,
                    "engine": run.engine.model_dump(exclude_defaults=True),
                    "num_gpu_blocks": run.num_gpu_blocks,
                    "max_num_batched_tokens": run.max_num_batched_tokens,
                    "max_num_seqs": run.max_num_seqs,
                }
                for role, run in self.runs.items()
            },
        }


def resolve_pd(
    spec: PDSpec | None,
    kv_cache_config: KVCacheConfig,
    tensor_parallel_size: int,
    gpu: Any,
) -> PDSetup | None:
    """The P/D setup of a run (None: not a P/D run); ValueError naming ``--pd`` when
    the KV layout is one the NIXL connector port does not cover."""
    if spec is None:
        return None
    try:
        NixlConnectorScheduler.check_supported(kv_cache_config)
    except ValueError as e:
        raise ValueError(f"--pd: {e} (this model's KV layout is not supported)") from None
    gbps = spec.kv_transfer_gbps
    us = spec.kv_transfer_latency_us
    return PDSetup(
        num_prefill=spec.num_prefill,
        num_decode=spec.num_decode,
        worker_kv_bytes_per_block=worker_kv_bytes_per_block(kv_cache_config),
        world_size=tensor_parallel_size,
        link_bytes_per_s=gpu.kv_transfer_bytes_per_s if gbps is None else gbps * 1e9,
        latency_s=gpu.kv_transfer_latency_s if us is None else us * 1e-6,
    )


def check_pd_run(setup: PDSetup, *, offload: bool, spec_decode: bool) -> None:
    """ValueError (one line, naming the flag) for what P/D runs do not combine with."""
    if offload:
        raise ValueError("--pd: not modelled together with --kv-offloading-size")
    if spec_decode:
        raise ValueError("--pd: not modelled together with --speculative-config")


def check_decode_fits(
    num_gpu_blocks: int, block_size: int, max_request_tokens: int, max_model_len: int
) -> None:
    """ValueError when a decode instance's KV cache cannot hold one request of the
    workload's longest (prompt + output, capped at max_model_len) tokens: it would wait
    for its blocks forever."""
    tokens = min(max_request_tokens, max_model_len)
    need = -(-tokens // block_size)
    if need > num_gpu_blocks:
        raise ValueError(
            f"--pd: a decode instance's KV cache ({num_gpu_blocks} blocks of {block_size} "
            f"tokens) cannot hold one request of the workload's longest, {tokens} tokens "
            f"({need} blocks): give it more memory (--gpu-memory-utilization, "
            "--num-gpu-blocks-override) or lower --max-model-len"
        )
