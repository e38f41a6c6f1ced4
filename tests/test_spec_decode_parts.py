"""Speculative decoding's simulator parts, without an engine run: the acceptance model
(statistics, seeding), the fake model's samples and the drafter's proposals, the
drafter's cost (skipped steps cost nothing), the KV budget with a draft model, and
the settings' checks."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from calibrate.budget import compute_kv_budget
from calibrate.catalog import load_gpu, load_model
from calibrate.latency import make_latency_model
from kvcore.spec_decode import SpecDecodingStats
from sim.app.engine_config import EngineConfig, load_engine_config
from sim.spec_decode.acceptance import AcceptanceModel, AcceptanceSampler, default_rates
from sim.spec_decode.drafter import NGRAM_S_PER_REQUEST, DrafterCost
from sim.spec_decode.engine import SpecDecodeRun
from sim.spec_decode.setup import resolve_spec

# -- the acceptance model ----------------------------------------------------------


def test_mean_accepted_is_the_sum_of_running_products():
    m = AcceptanceModel.build("draft_model", 3, [0.8, 0.5, 0.5])
    assert m.mean_accepted() == pytest.approx(0.8 + 0.4 + 0.2)
    one = AcceptanceModel.build("draft_model", 4, 0.6)
    p = 0.6
    assert one.mean_accepted() == pytest.approx(p * (1 - p**4) / (1 - p))
    ngram = AcceptanceModel.build("ngram", 4, 0.6, proposal_rate=0.5)
    assert ngram.mean_tokens_per_decode() == pytest.approx(1 + 0.5 * one.mean_accepted())


def test_draws_match_the_model_and_positions_are_conditional():
    m = AcceptanceModel.build("draft_model", 4, [0.9, 0.7, 0.5, 0.3])
    s = AcceptanceSampler(m, np.random.default_rng(7))
    a = np.array(s.accepted([4] * 40_000))
    assert a.min() >= 0 and a.max() <= 4
    assert a.mean() == pytest.approx(m.mean_accepted(), rel=0.02)
    surv = m.survival()
    for i in range(4):  # P(a >= i+1) = p_1 ... p_{i+1}
        assert (a >= i + 1).mean() == pytest.approx(surv[i], abs=0.01)
    # A draft shorter than k accepts at most its length.
    assert max(s.accepted([1] * 1000)) == 1


def test_same_seed_same_draws_other_seed_other_draws():
    m = AcceptanceModel.build("ngram", 3)
    a = AcceptanceSampler.seeded(m, 5, 0)
    b = AcceptanceSampler.seeded(m, 5, 0)
    c = AcceptanceSampler.seeded(m, 6, 0)
    d = AcceptanceSampler.seeded(m, 5, 1)  # another replica
    draws = [x.accepted([3] * 200) + x.proposes(200) for x in (a, b, c, d)]
    assert draws[0] == draws[1]
    assert draws[0] != draws[2] and draws[0] != draws[3]


def test_defaults_are_low_for_ngram_and_higher_for_a_draft_model():
    ngram, draft = default_rates("ngram", 4), default_rates("draft_model", 4)
    assert 0.3 <= ngram[0] <= 0.5 and 0.6 <= draft[0] <= 0.8
    assert list(ngram) == sorted(ngram, reverse=True)
    assert AcceptanceModel.build("ngram", 3).proposal_rate < 1.0
    assert AcceptanceModel.build("draft_model", 3).proposal_rate == 1.0
    # EAGLE-3's defaults: a mean acceptance length of 2.8 tokens at k = 3
    # (sim/spec_decode/acceptance.py's docstring and docs/engine.md quote it).
    eagle3 = AcceptanceModel.build("eagle3", 3)
    assert eagle3.proposal_rate == 1.0
    assert round(eagle3.mean_tokens_per_decode(), 2) == 2.82


# -- the fake model and the drafter's proposals -------------------------------------


def _run(method: str, *, async_scheduling: bool, rates=1.0, proposal=None) -> SpecDecodeRun:
    model = AcceptanceModel.build(method, 3, rates, proposal)
    return SpecDecodeRun(
        method,
        3,
        AcceptanceSampler(model, np.random.default_rng(0)),
        DrafterCost(method, 3),
        9,
        async_scheduling=async_scheduling,
    )


def _step(drafts: dict[str, list[int]]):
    requests = {
        "p": SimpleNamespace(is_prefill_chunk=True),  # a partial prefill: samples nothing
        "f": SimpleNamespace(is_prefill_chunk=False),  # its prefill ends: one token
        "d": SimpleNamespace(is_prefill_chunk=False),  # decodes with drafts
    }
    out = SimpleNamespace(
        num_scheduled_tokens={"p": 64, "f": 10, "d": 1 + len(drafts.get("d", []))},
        scheduled_spec_decode_tokens=drafts,
        skip_drafts=False,
    )
    return SimpleNamespace(requests=requests), out


def test_samples_one_plus_accepted_and_nothing_for_a_prefill_chunk():
    sched, out = _step({"d": [9, 9, 9]})
    sampled = _run("draft_model", async_scheduling=False).sample(sched, out)
    assert sampled == {"f": [9], "d": [9, 9, 9, 9]}  # all 3 accepted at rate 1
    none = _run("draft_model", async_scheduling=False, rates=0.0).sample(sched, out)
    assert none == {"f": [9], "d": [9]}


def test_async_ngram_without_a_match_accepts_none_of_the_placeholders():
    sched, out = _step({"d": [9, 9, 9]})
    run = _run("ngram", async_scheduling=True, rates=1.0, proposal=0.0)
    assert run.sample(sched, out)["d"] == [9]


def test_sync_proposals_skip_finished_and_unmatched_requests():
    draft = _run("draft_model", async_scheduling=False)
    assert draft.drafts({"f": [9], "d": [9, 9]}, ["f"]) == {"d": [9, 9, 9]}
    ngram = _run("ngram", async_scheduling=False, proposal=0.0)
    assert ngram.drafts({"f": [9], "d": [9]}, []) == {"f": [], "d": []}


# -- the drafter's cost ---------------------------------------------------------------


def test_draft_model_cost_k_passes_and_skipped_steps_cost_nothing():
    gpu = load_gpu("H100-SXM")
    draft = make_latency_model("roofline", model=load_model("Llama-3.2-1B"), gpu=gpu)
    target = make_latency_model("roofline", model=load_model("Llama-3.1-8B"), gpu=gpu)
    new, ctx = [4] * 32, [1000] * 32
    cost1 = DrafterCost("draft_model", 1, draft).step_s(new, ctx, 32, 32 * 1004)
    cost4 = DrafterCost("draft_model", 4, draft).step_s(new, ctx, 32, 32 * 1004)
    verify = target.step_time(np.array(new), np.array(ctx))
    assert 0 < cost1 < cost4 < verify * 2  # three more decode passes, each cheaper
    assert cost4 - cost1 == pytest.approx(
        float(np.sum(draft.decode_step_times(np.full(3, 32), 32 * 1004 + 32 * np.arange(3)))),
    )
    ngram = DrafterCost("ngram", 4)
    assert ngram.step_s(new, ctx, 32, 0) == pytest.approx(32 * NGRAM_S_PER_REQUEST)

    run = SpecDecodeRun(
        "draft_model",
        4,
        AcceptanceSampler(AcceptanceModel.build("draft_model", 4), np.random.default_rng(0)),
        DrafterCost("draft_model", 4, draft),
        9,
        async_scheduling=False,
    )
    skipped = SimpleNamespace(skip_drafts=True)
    assert run.drafter_step_s(skipped, new, ctx, 32, 32 * 1004) == 0.0
    assert run.num_skipped == 1 and run.drafter_s == 0.0
    drafted = SimpleNamespace(skip_drafts=False)
    assert run.drafter_step_s(drafted, new, ctx, 32, 32 * 1004) == pytest.approx(cost4)
    assert run.drafter_s == pytest.approx(cost4)


# -- the KV budget and the settings ---------------------------------------------------


def test_a_draft_model_costs_weights_and_kv_per_block():
    model, gpu = load_model("Llama-3.1-8B"), load_gpu("H100-SXM")
    draft = load_model("Llama-3.2-1B")
    alone = compute_kv_budget(model, gpu, max_model_len=8192)
    both = compute_kv_budget(model, gpu, max_model_len=8192, draft_model=draft)
    assert both.weights_bytes - alone.weights_bytes == both.draft_weights_bytes > 2 * 2**30
    # Draft pages: 16 layers x 8 heads x 64 dims x K and V x 2 bytes x 16 tokens.
    assert both.bytes_per_block - alone.bytes_per_block == 16 * 8 * 64 * 2 * 2 * 16
    assert both.num_gpu_blocks < alone.num_gpu_blocks * 0.8
    assert "draft_model" not in alone.to_dict() and both.to_dict()["draft_model"] == "Llama-3.2-1B"


def test_an_eagle3_head_is_one_layer_of_the_target_with_a_draft_vocabulary():
    """EAGLE-3's head: one decoder layer of the target's shape, a 3h x h input
    projection, a 32,000-token output vocabulary (the target's embedding is shared);
    its one attention layer adds one layer's pages to every block."""
    from calibrate.budget import draft_model_of
    from calibrate.eagle_head import eagle_head

    model, gpu = load_model("Llama-3.1-8B"), load_gpu("H100-SXM")
    head = eagle_head(model, "eagle3")
    assert head.num_layers == 1 and head.vocab_size == 32_000 and head.tie_word_embeddings
    h = model.hidden_size
    layer = (model.param_counts().attention + model.param_counts().dense_mlp) // 32
    expected = layer + 32_000 * h + 3 * h * h + 3 * h
    assert head.total_params == expected
    assert eagle_head(model, "eagle").vocab_size == model.vocab_size
    engine = _engine(method="eagle3", num_speculative_tokens=3)
    assert draft_model_of(engine, model) == head
    alone = compute_kv_budget(model, gpu, max_model_len=8192)
    both = compute_kv_budget(model, gpu, max_model_len=8192, draft_model=head)
    assert both.bytes_per_block - alone.bytes_per_block == alone.bytes_per_block // 32
    assert alone.num_gpu_blocks * 0.9 < both.num_gpu_blocks < alone.num_gpu_blocks


def _engine(**spec) -> EngineConfig:
    return load_engine_config(None, {"speculative_config": spec, "max_model_len": 4096})


def test_settings_resolve_and_zero_tokens_is_off():
    ngram = _engine(method="ngram", num_speculative_tokens=3, acceptance_rate=0.4)
    setup = resolve_spec(
        ngram, max_model_len=4096, max_num_batched_tokens=8192, gpu=None, offload=False
    )
    assert setup is not None and setup.acceptance.rates == (0.4, 0.4, 0.4)
    assert setup.config.num_lookahead_tokens == 0
    off = _engine(method="ngram", num_speculative_tokens=0)
    assert off.speculative_config is None and off == EngineConfig(max_model_len=4096)
    assert "speculative_config" not in off.model_dump()


@pytest.mark.parametrize(
    ("spec", "needles"),
    [
        ({"method": "dflash", "num_speculative_tokens": 3}, ["method", "not modelled"]),
        ({"method": "mtp", "num_speculative_tokens": 1}, ["method", "not modelled"]),
        ({"method": "lookahead", "num_speculative_tokens": 3}, ["unknown method", "ngram"]),
        ({"method": "ngram", "num_speculative_tokens": -1}, ["num_speculative_tokens"]),
        ({"method": "draft_model", "num_speculative_tokens": 2}, ["needs model"]),
        ({"method": "ngram", "num_speculative_tokens": 2, "model": "x"}, ["not used by"]),
        ({"method": "ngram", "num_speculative_tokens": 2, "top_k": 1}, ["unknown key", "top_k"]),
        ({"method": "ngram", "num_speculative_tokens": 2, "acceptance_rate": [0.5]}, ["1 rates"]),
        ({"method": "ngram", "num_speculative_tokens": 2, "acceptance_rate": 2}, ["[0, 1]"]),
        ("{not json", ["not JSON"]),
    ],
)
def test_bad_settings_name_the_flag_and_the_key(spec, needles):
    with pytest.raises(ValueError) as e:
        load_engine_config(None, {"speculative_config": spec})
    msg = str(e.value)
    assert msg.startswith("--speculative-config: ") and "\n" not in msg
    for needle in needles:
        assert needle in msg, msg


def test_too_many_tokens_per_step_and_the_offload_tier_are_refused():
    eng = _engine(method="draft_model", model="Llama-3.2-1B", num_speculative_tokens=8)
    kw = {"gpu": load_gpu("H100-SXM"), "offload": False}
    with pytest.raises(ValueError, match="more than max_num_batched_tokens"):
        resolve_spec(eng, max_model_len=4096, max_num_batched_tokens=9, **kw)
    with pytest.raises(ValueError, match="more than max_model_len"):
        resolve_spec(eng, max_model_len=9, max_num_batched_tokens=4096, **kw)
    with pytest.raises(ValueError, match="kv-offloading-size"):
        resolve_spec(eng, max_model_len=4096, max_num_batched_tokens=4096, gpu=None, offload=True)


def test_acceptance_plot_draws_a_timeline(tmp_path):
    from reports.spec_plot import plot_spec_acceptance
    from sim.spec_decode.setup import write_timeline

    run = _run("draft_model", async_scheduling=False)
    for step in range(50):
        stats = SpecDecodingStats.new(3)
        stats.observe_draft(3, step % 4)
        run.observe(stats, 0.01 * (step + 1))
    run.observe(None, 1.0)  # a step without drafts leaves no row
    write_timeline(tmp_path / "spec_decode.csv", [run])
    lines = (tmp_path / "spec_decode.csv").read_text().splitlines()
    assert lines[0] == "replica,end_s,num_drafts,num_draft_tokens,num_accepted_tokens"
    assert len(lines) == 51 and lines[1] == "0,0.01,1,3,0"
    summary = {"sim_duration_s": 0.5, "spec_decode": {"acceptance_rate": 0.5}}
    png = plot_spec_acceptance(tmp_path / "spec_decode.csv", summary, tmp_path / "a.png")
    assert png is not None and png.stat().st_size > 1000


def test_budget_command_counts_the_draft_model():
    from typer.testing import CliRunner

    from sim.cli import app

    base = ["budget", "--json", "--max-model-len", "8192"]
    plain = CliRunner().invoke(app, base)
    spec = '{"method": "draft_model", "model": "Llama-3.2-1B", "num_speculative_tokens": 4}'
    with_draft = CliRunner().invoke(app, [*base, "--speculative-config", spec])
    assert plain.exit_code == with_draft.exit_code == 0, with_draft.output
    a, b = json.loads(plain.stdout), json.loads(with_draft.stdout)
    assert "draft_model" not in a and b["draft_model"] == "Llama-3.2-1B"
    assert b["num_gpu_blocks"] < a["num_gpu_blocks"]


def test_the_drafter_runs_at_the_targets_factors_and_cuda_graphs(tmp_path):
    """vLLM's drafter dispatches its forwards through the engine's captured sizes: a
    draft model's passes pad as the target's steps do (none with --enforce-eager), and
    it runs at the target's factors (here an efficiency file's, not the catalog's)."""
    from calibrate.efficiency_file import load_efficiency, write_efficiency
    from sim.app.run import RunSpec
    from sim.app.setup import resolve_run

    spec = {"method": "draft_model", "model": "Llama-3.2-1B", "num_speculative_tokens": 3}

    def resolved(calibration: str | None = None, **engine: object):
        cfg = EngineConfig(max_model_len=4096, max_num_seqs=64, speculative_config=spec, **engine)
        run = RunSpec(workload="chat", gpu="RTX-4090", engine=cfg, calibration=calibration)
        out = resolve_run(run)
        assert out.spec is not None
        return out.latency_model, out.spec.drafter.draft_latency

    target, draft = resolved()
    assert draft.cudagraph_sizes == target.cudagraph_sizes != ()

    def flops(model, tokens: float, requests: float = 30) -> float:
        return float(model.gemm_flops(np.array([tokens]), np.array([requests]))[0])

    _, eager = resolved(enforce_eager=True)
    assert eager.cudagraph_sizes == ()
    assert flops(draft, 30) == flops(eager, 32) > flops(eager, 30)  # the 32-token graph

    shipped = load_efficiency("calibrate/catalog/efficiency/rtx-4090.yaml")
    edited = shipped.model_copy(update={"efficiency": shipped.efficiency | {"memory": 0.5}})
    write_efficiency(edited, tmp_path / "fit.yaml")
    target, draft = resolved(calibration=str(tmp_path / "fit.yaml"))
    assert draft.eff == target.eff and draft.eff.memory == 0.5 != shipped.factors().memory
