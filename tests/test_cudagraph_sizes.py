"""CUDA graph capture sizes and the step padding they imply (the sizes against vLLM
0.33.0's own: tests/conformance/test_differential.py, sim/conformance/cudagraph.py)."""

from __future__ import annotations

import numpy as np

from calibrate.catalog import load_gpu, load_model
from calibrate.cudagraph_sizes import capture_sizes
from calibrate.roofline import RooflineEfficiency, RooflineLatencyModel
from calibrate.roofline_scalar import ScalarRoofline
from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec
from sim.app.setup import resolve_run


def test_padding() -> None:
    sizes = capture_sizes(256, 8192, "9.0")
    assert sizes[:5] == (1, 2, 4, 8, 16) and sizes[-2:] == (496, 512)
    model = RooflineLatencyModel(
        load_model("Llama-3.1-8B"), load_gpu("H100-SXM"), cudagraph_sizes=sizes
    )
    tokens = np.array([1, 3, 33, 256, 257, 512, 513], dtype=np.float64)
    assert model.graph_tokens(tokens).tolist() == [1, 4, 40, 256, 272, 512, 513]
    assert capture_sizes(1024, 8192, "10.0")[-1] == 1024  # data-centre Blackwell
    assert capture_sizes(1024, 8192, "9.0")[-1] == 512
    assert capture_sizes(64, 2048, "9.0")[-1] == 128  # 2 x max_num_seqs
    assert capture_sizes(256, 8192, enforce_eager=True) == ()


def test_a_padded_step_costs_its_graphs_size() -> None:
    """A compute-bound setting (a tiny compute efficiency): a step of 33 tokens runs its
    GEMMs on 40, as long as 40 tokens' step less their LM heads, attention and
    overheads; eager, it is cheaper; the scalar twin agrees with the array formula."""
    model, gpu = load_model("Llama-3.1-8B"), load_gpu("H100-SXM")
    eff = RooflineEfficiency(compute=0.01, step_overhead_s=0.0, per_request_overhead_s=0.0)
    sizes = capture_sizes(256, 8192, gpu.compute_capability)
    graphs = RooflineLatencyModel(model, gpu, 2, eff, cudagraph_sizes=sizes)
    eager = RooflineLatencyModel(model, gpu, 2, eff)
    n = np.array([33.0])
    np.testing.assert_allclose(graphs.gemm_flops(n, n), eager.gemm_flops(n + 7, n))
    assert graphs.decode_step_times([33], [33_000])[0] > eager.decode_step_times([33], [33_000])[0]
    twin = ScalarRoofline(graphs)
    for b in (1, 3, 33, 250, 257, 600):
        want = graphs.decode_step_times(np.array([b]), np.array([b * 700]))[0]
        assert twin.decode_time(b, b * 700) == want, b


def test_a_run_records_its_graphs_and_enforce_eager_drops_them() -> None:
    def described(**engine: object) -> dict:
        cfg = EngineConfig(max_model_len=8192, max_num_seqs=64, **engine)
        spec = RunSpec(workload="chat", model="Llama-3.1-8B", gpu="H100-SXM", engine=cfg)
        return resolve_run(spec).latency_description

    assert described()["cudagraph_max_tokens"] == 128
    assert described(enforce_eager=True)["cudagraph_max_tokens"] == 0
