"""The CPU KV offload tier of a run (``--kv-offloading-size``): setup and summary.

vLLM 0.33.0 turns ``--kv-offloading-size GiB`` (with ``--kv-offloading-backend
native``, its default) into the ``OffloadingConnector`` with
``cpu_bytes_to_use = size * 2**30`` and ``kv_role="kv_both"``
(``VllmConfig._post_init_kv_transfer_config``); the CPU tier holds
``cpu_offload_num_chunks`` chunks of one GPU block each
(``CPUOffloadingSpec.__init__``). Here :func:`resolve_offload` computes that once per
run, :func:`build_connector` makes each replica's scheduler-side connector
(:class:`kvcore.offloading_connector.OffloadingConnectorScheduler`), the engine
(:mod:`sim.engine.replica`) times the copies on a :class:`sim.engine.offload_transfers.HostLink` and
counts them in an :class:`OffloadStats`, and :func:`offload_summary` is
``summary.json``'s ``offload`` block.

Units: bytes, seconds, GiB (2**30 bytes) for the tier's size, GB/s (10**9 bytes/s)
for the link.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvcore.cpu_offload_manager import cpu_offload_num_chunks
from kvcore.kv_cache_config import KVCacheConfig
from kvcore.offloading_connector import OffloadingConnectorScheduler
from sim.engine.offload_transfers import HostLink

GIB = 1 << 30

FAST_FORWARD_NOT_APPLICABLE = (
    "not applicable: the KV offloading connector (every step is stepped, with its transfers)"
)
"""What ``config.yaml`` records for fast-forward when the CPU tier is on."""


@dataclass(frozen=True)
class OffloadSetup:
    """The CPU tier of one replica, resolved.

    ``size_gib``: ``--kv-offloading-size`` (over all TP ranks); ``num_cpu_chunks``: the
    tier's capacity in chunks (one GPU block each); ``worker_kv_bytes_per_block``: one
    GPU block's KV bytes on one TP rank (all layers); ``world_size``: TP ranks (each
    copies its own shard over its own link at the same time);
    ``host_link_bytes_per_s``: one rank's host link, each direction."""

    size_gib: float
    num_cpu_chunks: int
    worker_kv_bytes_per_block: int
    world_size: int
    host_link_bytes_per_s: float
    blocks_per_chunk: int = 1

    @property
    def num_cpu_blocks(self) -> int:
        """The tier's capacity in GPU-sized blocks."""
        return self.num_cpu_chunks * self.blocks_per_chunk

    def describe(self) -> dict[str, Any]:
        """The ``offload`` entry of ``config.yaml``."""
        return {
            "kv_offloading_size_gib": self.size_gib,
            "kv_offloading_backend": "native",
            "connector": "OffloadingConnector (CPUOffloadingSpec, LRU), kv_role kv_both",
            "num_cpu_blocks": self.num_cpu_blocks,
            "worker_kv_bytes_per_block": self.worker_kv_bytes_per_block,
            "world_size": self.world_size,
            "host_link_gbps": self.host_link_bytes_per_s / 1e9,
        }


def worker_kv_bytes_per_block(kv_cache_config: KVCacheConfig) -> int:
    """One GPU block's KV bytes on one worker, all layers (vLLM's offloading config:
    ``kv_cache_tensors[0].size // num_blocks``, else the groups' page sizes times
    their layer counts)."""
    cfg = kv_cache_config
    if cfg.num_blocks <= 0:
        return 0
    if cfg.kv_cache_tensors:
        return cfg.kv_cache_tensors[0].size // cfg.num_blocks
    return sum(g.kv_cache_spec.page_size_bytes * len(g.layer_names) for g in cfg.kv_cache_groups)


def resolve_offload(
    size_gib: float | None,
    kv_cache_config: KVCacheConfig,
    tensor_parallel_size: int,
    host_link_bytes_per_s: float,
) -> OffloadSetup | None:
    """The CPU tier for ``--kv-offloading-size size_gib`` (None: no tier). ValueError
    naming the flag when the KV layout is one the port does not cover, or the size
    holds no block."""
    if size_gib is None:
        return None
    try:
        OffloadingConnectorScheduler.check_supported(kv_cache_config)
    except ValueError as e:
        raise ValueError(f"--kv-offloading-size: {e}") from None
    per_block = worker_kv_bytes_per_block(kv_cache_config)
    chunks = cpu_offload_num_chunks(int(size_gib * GIB), per_block, 1, tensor_parallel_size)
    if chunks < 1:
        raise ValueError(
            f"--kv-offloading-size: {size_gib:g} GiB holds no KV block "
            f"({per_block * tensor_parallel_size} bytes each over all ranks)"
        )
    return OffloadSetup(
        size_gib=float(size_gib),
        num_cpu_chunks=chunks,
        worker_kv_bytes_per_block=per_block,
        world_size=tensor_parallel_size,
        host_link_bytes_per_s=host_link_bytes_per_s,
    )


def build_connector(
    setup: OffloadSetup, kv_cache_config: KVCacheConfig, enable_prefix_caching: bool
) -> OffloadingConnectorScheduler:
    """A fresh scheduler-side connector for one replica."""
    return OffloadingConnectorScheduler(
        kv_cache_config,
        setup.num_cpu_chunks,
        blocks_per_chunk=setup.blocks_per_chunk,
        enable_prefix_caching=enable_prefix_caching,
        num_workers=setup.world_size,
    )


def make_host_link(setup: OffloadSetup) -> HostLink:
    """One replica's host link (its TP ranks copy in parallel: one link stands for all)."""
    return HostLink(setup.host_link_bytes_per_s, setup.host_link_bytes_per_s)


@dataclass
class OffloadStats:
    """What one replica's transfers moved. Bytes are one rank's (multiply by
    ``world_size`` for all ranks); seconds are the link direction's busy time."""

    num_loads: int = 0
    num_stores: int = 0
    load_blocks: int = 0
    store_blocks: int = 0
    load_bytes: int = 0
    store_bytes: int = 0
    load_s: float = 0.0
    store_s: float = 0.0
    peak_cpu_blocks: int = 0


def offload_summary(
    setup: OffloadSetup,
    stats: list[OffloadStats],
    connector_queries: int,
    connector_hits: int,
    gpu_queries: int,
    gpu_hits: int,
) -> dict[str, Any]:
    """``summary.json``'s ``offload`` block over all replicas.

    ``gpu_queries`` / ``gpu_hits``: prompt tokens looked up in and found in the GPU
    prefix cache (the ``prefix_cache_hit_rate`` counts); ``connector_queries`` /
    ``connector_hits``: tokens after the GPU hit looked up in and loaded from the CPU
    tier. Both rates are over ``gpu_queries`` (all prompt tokens looked up; with GPU
    prefix caching off, which records no lookups, over ``connector_queries``), so they
    add up to the share of looked-up prompt tokens not computed."""
    n = setup.world_size
    denom = gpu_queries or connector_queries
    peak = max((s.peak_cpu_blocks for s in stats), default=0)
    cap = setup.num_cpu_blocks
    return {
        "kv_offloading_size_gib": setup.size_gib,
        "num_cpu_blocks": cap,
        "host_link_gbps": setup.host_link_bytes_per_s / 1e9,
        "prefix_cache_queries": gpu_queries,
        "gpu_prefix_cache_hits": gpu_hits,
        "cpu_prefix_cache_hits": connector_hits,
        "gpu_prefix_cache_hit_rate": gpu_hits / denom if denom else 0.0,
        "cpu_prefix_cache_hit_rate": connector_hits / denom if denom else 0.0,
        "cpu_lookup_queries": connector_queries,
        "num_loads": sum(s.num_loads for s in stats),
        "num_stores": sum(s.num_stores for s in stats),
        "load_blocks": sum(s.load_blocks for s in stats),
        "store_blocks": sum(s.store_blocks for s in stats),
        "load_bytes": sum(s.load_bytes for s in stats) * n,
        "store_bytes": sum(s.store_bytes for s in stats) * n,
        "load_transfer_s": sum(s.load_s for s in stats),
        "store_transfer_s": sum(s.store_s for s in stats),
        "peak_cpu_blocks": peak,
        "peak_cpu_usage": peak / cap if cap else 0.0,
    }
