"""The roofline factors the catalog ships per GPU (calibrate/catalog/efficiency/): each
file describes its catalog GPU figure for figure and the data it was fitted on, and a
run on that GPU uses it unless told otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibrate.catalog import load_gpu, load_model
from calibrate.efficiency_file import sha256_of
from calibrate.gpu_efficiency import gpu_efficiency, shipped_efficiency
from calibrate.latency import make_latency_model
from calibrate.roofline import RooflineEfficiency
from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec
from sim.app.setup import resolve_run

REPO = Path(__file__).resolve().parents[1]


def test_the_catalog_ships_fits_for_the_gpus_with_public_runs() -> None:
    assert sorted(shipped_efficiency()) == ["rtx-4090", "rtx-pro-6000"]


@pytest.mark.parametrize("name", ["rtx-4090", "rtx-pro-6000"])
def test_a_shipped_fit_matches_its_gpu_and_its_data(name: str) -> None:
    cal, path = shipped_efficiency()[name]
    # a catalog GPU edited after the fit would silently lose its factors: refit then
    assert load_gpu(cal.gpu.name) == cal.gpu, f"{path}: refit (its header says how)"
    for run in cal.fitted_on:
        trace = REPO / run.trace
        assert trace.is_file() and sha256_of(trace) == run.sha256, run.trace
        fitted = run.errors["fitted"]
        assert abs(fitted["e2e_mean"]) < 0.05 and abs(fitted["tpot_mean"]) < 0.05, run


def test_a_run_on_the_gpu_uses_the_shipped_factors_and_says_so() -> None:
    engine = EngineConfig(max_model_len=8192)
    spec = RunSpec(workload="chat", model="Llama-3.1-8B", gpu="RTX-4090", engine=engine)
    described = resolve_run(spec).latency_description
    cal, _ = shipped_efficiency()["rtx-4090"]
    assert described["efficiency_source"] == "calibrate/catalog/efficiency/rtx-4090.yaml"
    assert described["memory"] == cal.efficiency["memory"] != RooflineEfficiency().memory


def test_other_hardware_or_given_factors_get_no_shipped_fit() -> None:
    model, gpu = load_model("Llama-3.1-8B"), load_gpu("RTX-4090")
    faster = gpu.model_copy(update={"hbm_bandwidth_gbps": 1100.0})
    assert gpu_efficiency(faster) is None
    generic = make_latency_model("roofline", model=model, gpu=faster).describe()
    assert generic["memory"] == RooflineEfficiency().memory and "efficiency_source" not in generic
    given = RooflineEfficiency(memory=0.5)
    told = make_latency_model("roofline", model=model, gpu=gpu, efficiency=given).describe()
    assert told["memory"] == 0.5 and "efficiency_source" not in told
    assert gpu_efficiency(load_gpu("H100-SXM")) is None
