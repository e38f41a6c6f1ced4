"""Host-link timing of KV offload transfers (sim.engine.offload_transfers)."""

from __future__ import annotations

import pytest

from sim.engine.offload_transfers import (
    DirectionQueue,
    HostLink,
    job_bytes,
    transfer_seconds,
)

GB = 1e9


def test_transfer_time_is_overhead_plus_bytes_over_bandwidth() -> None:
    # 16 blocks of a Llama-3-8B-like model (128 KiB per layer-block, 32 layers), 25 GB/s.
    num_bytes = job_bytes(16, 131072 * 32)
    assert num_bytes == 64 * 2**20
    assert transfer_seconds(num_bytes, 25 * GB) == pytest.approx(2.684e-3, rel=1e-3)
    assert transfer_seconds(num_bytes, 25 * GB, overhead_s=1e-5) == pytest.approx(
        2.694e-3, rel=1e-3
    )
    assert transfer_seconds(0, 25 * GB, overhead_s=1e-5) == 0.0
    with pytest.raises(ValueError):
        transfer_seconds(1, 0.0)


def test_one_direction_runs_its_transfers_one_after_another() -> None:
    q = DirectionQueue(bytes_per_s=1000.0)
    assert q.submit(0, 1000, ready_s=0.0) == 1.0
    assert q.submit(1, 500, ready_s=0.2) == 1.5  # waits for job 0
    assert q.submit(2, 100, ready_s=5.0) == 5.1  # the link was idle
    assert q.collect_finished(1.5) == [0, 1] and q.pending() == 1
    assert q.collect_finished(10.0) == [2]
    q.submit(3, 1, ready_s=0.0)
    with pytest.raises(ValueError, match="already submitted"):
        q.submit(3, 1, ready_s=0.0)


def test_loads_and_stores_use_the_link_at_the_same_time() -> None:
    link = HostLink(h2d_bytes_per_s=1000.0, d2h_bytes_per_s=500.0)
    assert link.submit_store(0, 1000, ready_s=0.0) == 2.0
    assert link.submit_load(1, 1000, ready_s=0.0) == 1.0
    assert link.wait_s({0, 1}) == 2.0 and link.wait_s([7]) == 0.0
    assert link.collect_finished(1.0) == [1]
    assert link.collect_finished(2.0) == [0]
