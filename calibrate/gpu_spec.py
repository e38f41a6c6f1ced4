"""What the simulator knows about one accelerator: memory, peak throughput, bandwidths.

Units: memory in bytes (``memory_bytes``: the total the driver reports to torch, which is
below the datasheet's decimal GB) or decimal GB (``memory_gb``: the datasheet figure);
throughput in TFLOP/s (10^12 FLOP per second, dense, i.e. without 2:4 sparsity);
bandwidths in GB/s (10^9 bytes per second). ``interconnect_bandwidth_gbps`` is one GPU's
bandwidth to its peers in one direction (NVLink / Infinity Fabric / PCIe), which is what
a ring all-reduce moves data at. ``link``, ``peer_to_peer``, ``compute_capability`` and
``custom_allreduce_latency_us`` decide how vLLM all-reduces across GPUs of this kind
and what a call costs (:mod:`calibrate.allreduce`). ``host_link_gbps`` is one GPU's
link to host (CPU) memory in one direction, which the CPU KV offload tier
(``--kv-offloading-size``) copies blocks over (:mod:`sim.engine.offload_transfers`).
``kv_transfer_gbps`` / ``kv_transfer_latency_us`` are one GPU's link to the GPUs of
*other* vLLM instances (its RDMA NIC), which a P/D deployment's decode instances read
the prefill instances' KV blocks over (:mod:`sim.engine.pd_transfers`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

GIB = 1 << 30

DEFAULT_HOST_LINK_GBPS = 32.0
"""A GPU's host link, one direction, GB/s, when its YAML gives none: PCIe Gen4 x16
(16 GT/s x 16 lanes, 128b/130b coding: 31.5 GB/s, rounded as datasheets quote it).
Catalog figures (one direction, the link's rate; sustained copies reach ~80-90% of
it): PCIe Gen5 x16 64 GB/s (H100 SXM, H200, B200, MI300X: PCI-SIG, PCIe 5.0 base
specification, 32 GT/s per lane), PCIe Gen4 x16 32 GB/s (A100, L40S, RTX 4090),
NVLink-C2C 450 GB/s on GH200-class parts (900 GB/s bidirectional: NVIDIA Grace
Hopper Superchip datasheet, https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/)."""

DEFAULT_KV_TRANSFER_GBPS = 50.0
"""One GPU's inter-instance KV link, one direction, GB/s, when its YAML gives none: one
400 Gb/s NIC per GPU (InfiniBand NDR / ConnectX-7, 400 Gb/s = 50 GB/s), the layout of
DGX/HGX H100 and H200 systems (eight ConnectX-7 400 Gb/s ports for eight GPUs: NVIDIA
DGX H100 user guide, https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html;
ConnectX-7 datasheet, https://www.nvidia.com/en-us/networking/ethernet-adapters/),
which NIXL reads over with UCX/RDMA (GPUDirect RDMA). Sustained RDMA reads reach
~90% of the line rate; instances on one node (NVLink) move KV much faster: a GPU
YAML or a P/D setup may give the link's figure instead."""

DEFAULT_KV_TRANSFER_LATENCY_US = 20.0
"""Fixed cost of one request's KV read, us, when the GPU YAML gives none: an RDMA
read's round trip over one switch is a few us (InfiniBand NDR: ~1-2 us port to port),
plus NIXL's descriptor preparation, posting and completion notification per request
(tens of us in NIXL's benchmarks); an assumption to refine with a measurement."""

LinkKind = Literal["nvlink", "pcie", "xgmi"]
"""How GPUs of one node reach each other: NVLink (a full mesh through NVSwitch, or a
pair), PCIe only, or AMD Infinity Fabric (XGMI)."""


class GPUSpec(BaseModel):
    """One GPU model of the catalog (strict: unknown YAML keys are rejected)."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    vendor: str = "NVIDIA"
    memory_gb: float = Field(gt=0, description="datasheet memory, decimal GB")
    memory_bytes: int = Field(gt=0, description="total as torch/cudaMemGetInfo reports, bytes")
    bf16_tflops: float = Field(gt=0, description="dense BF16 tensor-core peak, TFLOP/s")
    fp16_tflops: float = Field(gt=0, description="dense FP16 tensor-core peak, TFLOP/s")
    fp8_tflops: float | None = Field(default=None, gt=0, description="dense FP8 peak, TFLOP/s")
    hbm_bandwidth_gbps: float = Field(gt=0, description="device memory bandwidth, GB/s")
    interconnect: str = ""
    interconnect_bandwidth_gbps: float = Field(gt=0, description="per GPU, one direction, GB/s")
    link: LinkKind | None = Field(
        default=None, description="peer link kind; None: read from `interconnect`'s text"
    )
    peer_to_peer: bool = Field(
        default=True, description="GPUs map each other's memory (CUDA P2P) over PCIe"
    )
    compute_capability: str | None = Field(
        default=None, description="CUDA compute capability, e.g. '9.0' (vLLM's size tables)"
    )
    custom_allreduce_latency_us: float | None = Field(
        default=None, ge=0, description="vLLM custom all-reduce, per call, us; None: link default"
    )
    host_link_gbps: float | None = Field(
        default=None,
        gt=0,
        description="GPU <-> host memory, one direction, GB/s (KV offload); None: PCIe Gen4 x16",
    )
    kv_transfer_gbps: float | None = Field(
        default=None,
        gt=0,
        description="GPU -> GPU of another instance (P/D KV reads), one direction, GB/s; "
        "None: one 400 Gb/s NIC (50 GB/s)",
    )
    kv_transfer_latency_us: float | None = Field(
        default=None, ge=0, description="fixed cost of one P/D KV read, us; None: 20 us"
    )
    source: str = Field(min_length=1, description="where the figures come from (URLs)")
    notes: str = ""
    price_per_gpu_hour: float | None = Field(
        default=None, ge=0, description="what one GPU costs per hour, USD (kvsim recommend)"
    )

    @property
    def link_kind(self) -> LinkKind:
        """``link``, or read from ``interconnect``: PCIe, Infinity Fabric, else NVLink."""
        if self.link is not None:
            return self.link
        text = self.interconnect.lower()
        if "pcie" in text:
            return "pcie"
        if "infinity" in text or "xgmi" in text:
            return "xgmi"
        return "nvlink"

    @property
    def memory_gib(self) -> float:
        """``memory_bytes`` in GiB (2^30 bytes)."""
        return self.memory_bytes / GIB

    @property
    def hbm_bandwidth_bytes_per_s(self) -> float:
        """Device memory bandwidth in bytes/s."""
        return self.hbm_bandwidth_gbps * 1e9

    @property
    def interconnect_bytes_per_s(self) -> float:
        """Peer bandwidth (one direction) in bytes/s."""
        return self.interconnect_bandwidth_gbps * 1e9

    @property
    def host_link_bytes_per_s(self) -> float:
        """The host link (one direction) in bytes/s: ``host_link_gbps``, else
        :data:`DEFAULT_HOST_LINK_GBPS`."""
        gbps = self.host_link_gbps if self.host_link_gbps is not None else DEFAULT_HOST_LINK_GBPS
        return gbps * 1e9

    @property
    def kv_transfer_bytes_per_s(self) -> float:
        """The inter-instance KV link (one direction) in bytes/s: ``kv_transfer_gbps``,
        else :data:`DEFAULT_KV_TRANSFER_GBPS`."""
        gbps = self.kv_transfer_gbps
        return (gbps if gbps is not None else DEFAULT_KV_TRANSFER_GBPS) * 1e9

    @property
    def kv_transfer_latency_s(self) -> float:
        """Fixed cost of one KV read in seconds: ``kv_transfer_latency_us``, else
        :data:`DEFAULT_KV_TRANSFER_LATENCY_US`."""
        us = self.kv_transfer_latency_us
        return (us if us is not None else DEFAULT_KV_TRANSFER_LATENCY_US) * 1e-6

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor-core peak in FLOP/s for GEMMs whose weights are ``dtype``.

        fp8 weights use the FP8 peak where the GPU has one, else the BF16 peak (the
        weights are upcast); float16 uses the FP16 peak; everything else BF16.
        """
        if dtype.startswith("fp8") and self.fp8_tflops is not None:
            return self.fp8_tflops * 1e12
        if dtype in ("float16", "half"):
            return self.fp16_tflops * 1e12
        return self.bf16_tflops * 1e12
