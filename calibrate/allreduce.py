"""Tensor-parallel all-reduce time per call: vLLM's choice of algorithm, and its cost.

vLLM 0.33 (``vllm/distributed/device_communicators``: ``cuda_communicator.py``,
``custom_all_reduce.py``, ``all_reduce_utils.py``; the kernels in its
``csrc/custom_all_reduce.cuh``) reduces a TP group's activations with its own
**custom all-reduce** when it can and with **NCCL** otherwise:

* the custom kernel needs a world size of 2, 4, 6, 8 (or 16, which it then declines
  per call), GPUs that map each other's memory (CUDA peer-to-peer), and for more than
  two GPUs a full NVLink mesh; two PCIe GPUs with P2P qualify, GeForce cards whose
  driver refuses P2P do not;
* it takes messages below a maximum size: 8 MiB, lowered on compute capability 9.0
  to 512 KiB at 6 GPUs and 256 KiB at 8, and on 10.x to 2 MiB at 2-4 GPUs and 1 MiB
  at 6-8 (where symmetric memory is on, vLLM's default);
* it runs **one-shot** (each GPU reads every peer's whole buffer: ``(w - 1) S`` bytes
  in) at 2 GPUs, and on a full mesh below 512 KiB (up to 4 GPUs) or 256 KiB (up to 8);
  **two-shot** (reduce-scatter then all-gather: ``2 (w - 1) / w S``) above;
* larger messages go to torch symmetric memory where the architecture has a table for
  it (9.0 and 10.x, NVLink: up to 64 MiB on 9.0 at 2, 6 and 8 GPUs, 32 MiB at 4;
  10.0: 8, 32, 128, 128 MiB), modelled as the custom two-shot kernel, and beyond
  that (or without it) to NCCL: a ring, ``latency(w) + 2 (w - 1) / w S /
  (efficiency * link)``.

NCCL's latency and link efficiency are fitted on Vidur's A100 measurements
(:mod:`calibrate.roofline_fit.allreduce_fit`: 36 us and 0.65 of NVLink at 2 GPUs,
57 us and 0.74 of PCIe Gen4 for a 4-GPU ring); the 4-GPU latency is used for more
GPUs too (no data beyond 4). These are eager calls (no CUDA graph), what large
prefill steps pay. The custom kernel's
per-call latency is the GPU's ``custom_allreduce_latency_us`` or the link's default
below, an assumption (no public per-call measurement for vLLM's kernel is at hand):
a few microseconds, on the order of the 4-8 us that FlashInfer's PCIe IPC and NCCL
collectives take for one-row messages under CUDA graphs (flashinfer-ai/flashinfer
PR 5023). Its link efficiency is taken as NCCL's on the same link.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibrate.gpu_spec import GPUSpec, LinkKind

KIB, MIB = 1024, 1024 * 1024

CUSTOM_WORLD_SIZES = (2, 4, 6, 8)
"""World sizes vLLM's custom all-reduce serves (16 is set up but declined per call)."""
CUSTOM_DEFAULT_MAX_BYTES = 8 * MIB
CUSTOM_MAX_BYTES_BY_CAPABILITY: dict[str, dict[int, int]] = {
    "9.0": {2: 8 * MIB, 4: 8 * MIB, 6: MIB // 2, 8: MIB // 4},
    "10.0": {2: 2 * MIB, 4: 2 * MIB, 6: MIB, 8: MIB},
}
"""The custom kernel's size limit per compute capability and world size (bytes): the
smaller of 8 MiB and vLLM's per-architecture table (symmetric memory on)."""
SYMM_MEM_MAX_BYTES_BY_CAPABILITY: dict[str, dict[int, int]] = {
    "9.0": {2: 64 * MIB, 4: 32 * MIB, 6: 64 * MIB, 8: 64 * MIB},
    "10.0": {2: 8 * MIB, 4: 32 * MIB, 6: 128 * MIB, 8: 128 * MIB},
}
"""vLLM's torch-symmetric-memory all-reduce size limit (bytes), NVLink GPUs only."""


@dataclass(frozen=True)
class LinkDefaults:
    """Per link kind: NCCL's per-call latency at 2 GPUs and at 4 or more (seconds),
    NCCL's fraction of the link, the custom kernel's per-call latency (seconds)."""

    nccl_latency_2_s: float
    nccl_latency_4_s: float
    nccl_efficiency: float
    custom_latency_s: float


NCCL_LATENCY_2_S = 36e-6
"""Fitted: Vidur's 2-GPU NVLink all-reduce. Also the reference that
``RooflineEfficiency.allreduce_latency_s`` scales every algorithm's latency by."""
NCCL_LATENCY_4_S = 57e-6
"""Fitted: Vidur's 4-GPU (PCIe-bound ring) all-reduce."""
LINKS: dict[LinkKind, LinkDefaults] = {
    "nvlink": LinkDefaults(NCCL_LATENCY_2_S, NCCL_LATENCY_4_S, 0.65, 6e-6),
    "xgmi": LinkDefaults(NCCL_LATENCY_2_S, NCCL_LATENCY_4_S, 0.65, 6e-6),
    "pcie": LinkDefaults(NCCL_LATENCY_2_S, NCCL_LATENCY_4_S, 0.74, 10e-6),
}
"""NVLink: Vidur's 2-GPU fit (0.65 of 300 GB/s); PCIe: its 4-GPU ring over PCIe Gen4
(0.74 of 32 GB/s); Infinity Fabric (XGMI, MI300X): no data, NVLink's figures. The
custom kernel's latency: 6 us on NVLink/XGMI, 10 us over PCIe (assumed, see the
module docstring)."""


def custom_max_bytes(gpu: GPUSpec, world_size: int) -> int:
    """The custom kernel's message-size limit for ``world_size`` GPUs (bytes)."""
    table = CUSTOM_MAX_BYTES_BY_CAPABILITY.get(gpu.compute_capability or "", {})
    return min(table.get(world_size, CUSTOM_DEFAULT_MAX_BYTES), CUSTOM_DEFAULT_MAX_BYTES)


def symm_mem_max_bytes(gpu: GPUSpec, world_size: int) -> int:
    """vLLM's symmetric-memory all-reduce limit on ``world_size`` GPUs (0: not used)."""
    if gpu.link_kind != "nvlink":
        return 0
    return SYMM_MEM_MAX_BYTES_BY_CAPABILITY.get(gpu.compute_capability or "", {}).get(world_size, 0)


def custom_available(gpu: GPUSpec, world_size: int) -> bool:
    """Whether vLLM sets up its custom all-reduce for ``world_size`` GPUs of ``gpu``."""
    if world_size not in CUSTOM_WORLD_SIZES:
        return False
    if gpu.link_kind == "pcie":
        return world_size == 2 and gpu.peer_to_peer
    return True


class AllReducePlan:
    """Seconds of one all-reduce of ``S`` bytes over ``world_size`` GPUs of ``gpu`` at
    the link's nominal bandwidth and the fitted efficiencies (module docstring).

    ``parts`` (Python floats) and ``parts_array`` (numpy) give the same constants, so
    times built from them with the same operations agree bit for bit.
    """

    def __init__(self, gpu: GPUSpec, world_size: int) -> None:
        if world_size < 2:
            raise ValueError(f"an all-reduce needs >= 2 GPUs, got {world_size!r}")
        w = world_size
        link = LINKS[gpu.link_kind]
        bw = float(gpu.interconnect_bytes_per_s * link.nccl_efficiency)
        self.nccl_latency = float(link.nccl_latency_2_s if w == 2 else link.nccl_latency_4_s)
        self.ring = 2.0 * (w - 1) / w / bw  # seconds per byte, ring and two-shot
        self.custom = custom_available(gpu, w)
        self.custom_max = float(custom_max_bytes(gpu, w)) if self.custom else 0.0
        # below this size (bytes) the custom kernel or symmetric memory serves the call
        self.fast_max = max(self.custom_max, float(symm_mem_max_bytes(gpu, w)))
        lat_us = gpu.custom_allreduce_latency_us
        self.custom_latency = float(link.custom_latency_s if lat_us is None else lat_us * 1e-6)
        self.one_shot = (w - 1.0) / bw  # seconds per byte
        # one-shot below this size (bytes): always at 2 GPUs, else by world size
        if w == 2:
            self.one_shot_max = self.custom_max
        elif w <= 4:
            self.one_shot_max = min(512.0 * KIB, self.custom_max)
        else:
            self.one_shot_max = min(256.0 * KIB, self.custom_max)

    def parts(self, size: float) -> tuple[float, float]:
        """One call of ``size`` bytes: (latency in seconds, seconds per byte)."""
        latency = self.custom_latency if size < self.fast_max else self.nccl_latency
        return latency, self.one_shot if size < self.one_shot_max else self.ring

    def parts_array(self, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``parts`` elementwise."""
        size = np.asarray(size, dtype=np.float64)
        latency = np.where(size < self.fast_max, self.custom_latency, self.nccl_latency)
        per_byte = np.where(size < self.one_shot_max, self.one_shot, self.ring)
        return latency, per_byte

    def seconds(self, size: float) -> float:
        """One call's seconds for ``size`` bytes: latency plus bytes at the link."""
        latency, per_byte = self.parts(size)
        return latency + size * per_byte
