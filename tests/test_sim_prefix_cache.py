"""Prefix-cache hit rate on the rag preset matches the analytical shared fraction.

The bundled ``rag`` preset (8 documents of 3000 tokens, Zipf popularity, short
questions) is copied with ``num_requests`` 200 and run on the default KV budget
(27,000+ blocks on Llama-3.1-8B / H100: the 8 documents take ~1,500, so nothing is
evicted). ``summary.json``'s ``prefix_cache_hit_rate`` (hit tokens / queried tokens)
must be within 5% *relative* of ``workloads.expected_prefix_hit_fraction`` for that
spec and N = 200 (the formula counts each group's first request as a miss and hits
floor(3000 / 16) * 16 tokens on every later one). The hit rate summed from
``steps.csv`` must equal the summary's, and no prefix caching gives 0.
"""

from __future__ import annotations

import json

import pytest
import yaml
from sim_run_helpers import column, read_csv, run_sim, write_yaml

from workloads import expected_prefix_hit_fraction
from workloads.loader import PRESET_DIR, load_spec

NUM_REQUESTS = 200
REL_TOL = 0.05


@pytest.fixture(scope="module")
def rag_copy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rag")
    data = yaml.safe_load((PRESET_DIR / "rag.yaml").read_text())
    data["num_requests"] = NUM_REQUESTS
    return tmp, write_yaml(tmp / "rag200.yaml", data)


def test_rag_hit_rate_matches_analytic(rag_copy):
    """Simulated hit rate within 5% relative of the expected shared fraction."""
    tmp, workload = rag_copy
    out = tmp / "out"
    summary = run_sim(workload, out)
    assert summary["num_finished"] == NUM_REQUESTS
    assert summary["num_preemptions"] == 0
    expected = expected_prefix_hit_fraction(
        load_spec(workload), block_size=16, num_requests=NUM_REQUESTS
    )
    assert 0.9 < expected < 1.0
    assert summary["prefix_cache_hit_rate"] == pytest.approx(expected, rel=REL_TOL)

    _, steps = read_csv(out / "steps.csv")
    hits, queries = column(steps, "prefix_hits").sum(), column(steps, "prefix_queries").sum()
    assert hits / queries == pytest.approx(summary["prefix_cache_hit_rate"], rel=1e-12)
    # Nothing evicted: the cache never ran short of free blocks.
    assert column(steps, "num_free_blocks").min() > 0.5 * summary["num_gpu_blocks"]
    _, reqs = read_csv(out / "requests.csv")
    cached = column(reqs, "cached_tokens").sum()
    prompt = column(reqs, "prompt_tokens").sum()
    assert cached / prompt == pytest.approx(expected, rel=REL_TOL)


def test_rag_without_prefix_caching_hits_nothing(rag_copy):
    """Control: with --no-enable-prefix-caching the hit rate is exactly 0."""
    tmp, workload = rag_copy
    summary = run_sim(workload, tmp / "nocache", enable_prefix_caching=False)
    assert summary["prefix_cache_hit_rate"] == 0.0
    assert json.loads((tmp / "nocache" / "summary.json").read_text())["num_finished"] == 200
