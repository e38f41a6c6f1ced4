"""Memory measurement backends for ``calibrate.profile_run``.

A backend answers what vLLM's ``MemorySnapshot`` measures (bytes): device ``free`` and
``total`` (``cudaMemGetInfo``), torch's ``allocated`` and ``peak`` allocated bytes, and
torch's ``reserved`` bytes. ``phase(name, **hints)`` brackets one step of the profile
and yields the hint dict (the caller may fill it in); the CUDA backend ignores the
hints and measures, the analytic backend books the hinted allocations on a simulated
device instead, so one profile code path runs on a CPU.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class MemorySnapshot:
    """One measurement (bytes)."""

    free_bytes: int
    total_bytes: int
    torch_allocated_bytes: int
    torch_peak_bytes: int
    torch_reserved_bytes: int


class MemoryBackend(Protocol):
    """What ``profile_run`` needs from a device."""

    name: str

    def snapshot(self) -> MemorySnapshot: ...

    def reset_peak(self) -> None: ...

    def cleanup(self) -> None: ...

    def phase(self, name: str, **hints: int) -> Iterator[dict[str, int]]: ...


class CudaMemoryBackend:
    """Measures with ``torch.cuda`` (allocator statistics and ``mem_get_info``)."""

    name = "cuda"

    def __init__(self, device: int = 0) -> None:
        import torch

        self.torch, self.device = torch, device

    def snapshot(self) -> MemorySnapshot:
        cuda = self.torch.cuda
        cuda.synchronize(self.device)
        stats = cuda.memory_stats(self.device)
        free, total = cuda.mem_get_info(self.device)
        return MemorySnapshot(
            free_bytes=int(free),
            total_bytes=int(total),
            torch_allocated_bytes=int(stats.get("allocated_bytes.all.current", 0)),
            torch_peak_bytes=int(stats.get("allocated_bytes.all.peak", 0)),
            torch_reserved_bytes=int(cuda.memory_reserved(self.device)),
        )

    def reset_peak(self) -> None:
        self.torch.cuda.reset_peak_memory_stats(self.device)

    def cleanup(self) -> None:
        gc.collect()
        self.torch.cuda.synchronize(self.device)
        self.torch.cuda.empty_cache()

    @contextmanager
    def phase(self, name: str, **hints: int) -> Iterator[dict[str, int]]:
        yield dict(hints)
        self.torch.cuda.synchronize(self.device)


class AnalyticMemoryBackend:
    """A simulated device of ``total_bytes`` (``used_bytes`` taken before the profile
    starts, e.g. the CUDA context). Phases book their hints:

    * ``persistent=B``: B bytes of torch memory kept (weights);
    * ``transient=B``: a torch peak B above the current allocation, freed again;
    * ``non_torch=B``: B bytes outside torch's allocator (workspaces, communicators).
    """

    name = "analytic"

    def __init__(self, total_bytes: int, used_bytes: int = 0) -> None:
        self.total = int(total_bytes)
        self.non_torch = int(used_bytes)
        self.allocated = 0
        self.peak = 0

    def snapshot(self) -> MemorySnapshot:
        return MemorySnapshot(
            free_bytes=self.total - self.non_torch - self.allocated,
            total_bytes=self.total,
            torch_allocated_bytes=self.allocated,
            torch_peak_bytes=self.peak,
            torch_reserved_bytes=self.allocated,
        )

    def reset_peak(self) -> None:
        self.peak = self.allocated

    def cleanup(self) -> None:
        gc.collect()

    @contextmanager
    def phase(self, name: str, **hints: int) -> Iterator[dict[str, int]]:
        hints = dict(hints)
        yield hints  # the caller may add hints while the phase runs
        self.allocated += int(hints.get("persistent", 0))
        self.peak = max(self.peak, self.allocated + int(hints.get("transient", 0)))
        self.non_torch += int(hints.get("non_torch", 0))
