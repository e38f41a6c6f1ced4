"""P/D pools of different tensor-parallel sizes (vLLM's NIXL connector maps ranks by
their ratio).

Llama-3.1-8B on H100-SXM, constant step times: one block is 2 MiB over all ranks
(``BLOCK_BYTES``), half of it on each rank at TP 2. A read moves the whole block
whatever the split, and takes as long as the side that moves more per rank: the TP 1
side, one whole block per rank, whichever pool it is.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from test_sim_pd import BLOCK_BYTES, _run, _trace

from sim.app.pd_config import parse_pd
from sim.app.pd_setup import pool_layout


def _pools(tmp_path: Path, prefill_tp: int, decode_tp: int, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"prefill: {{replicas: 1, engine: {{tensor_parallel_size: {prefill_tp}}}}}\n"
        f"decode: {{replicas: 2, engine: {{tensor_parallel_size: {decode_tp}}}}}\n"
    )
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pd-tp")
    trace = _trace(tmp)
    out = {}
    for p, d in ((1, 1), (2, 2), (1, 2), (2, 1)):
        pools = _pools(tmp, p, d, f"tp{p}{d}")
        out[(p, d)] = _run(trace, tmp / f"tp{p}{d}", parse_pd(str(pools)))
    return out


def test_a_read_moves_whole_blocks_whatever_the_tp_sizes(runs):
    for (p, d), (summary, rows) in runs.items():
        assert len(rows) == 8, (p, d)
        for r in rows:
            assert int(r["transfer_bytes"]) == int(r["transfer_blocks"]) * BLOCK_BYTES, (p, d)
        assert summary["pd"]["decode"]["blocks_in_use_at_end"] == 0
        assert summary["pd"]["prefill"]["blocks_in_use_at_end"] == 0


def test_a_read_takes_as_long_as_the_side_with_more_bytes_per_rank(runs):
    def link_s(key):
        return runs[key][0]["pd"]["transfers"]["link_seconds_mean"]

    # TP 2 on both sides: each rank moves half a block; one TP 1 side: a whole block
    assert link_s((1, 1)) == pytest.approx(link_s((1, 2)), rel=1e-9)
    assert link_s((1, 1)) == pytest.approx(link_s((2, 1)), rel=1e-9)
    # 20 us of latency per read, the rest halves with both sides at TP 2
    assert link_s((2, 2)) - 20e-6 == pytest.approx((link_s((1, 1)) - 20e-6) / 2, rel=1e-6)


def test_tp_sizes_that_do_not_divide_are_refused():
    def run(tp: int) -> SimpleNamespace:
        return SimpleNamespace(engine=SimpleNamespace(tensor_parallel_size=tp))

    with pytest.raises(ValueError, match=r"prefill pool's \(2\) and the decode pool's \(3\)"):
        pool_layout({"prefill": run(2), "decode": run(3)}, run(1))
