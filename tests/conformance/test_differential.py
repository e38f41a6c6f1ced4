"""Randomized differential conformance: kvcore makes vLLM 0.33.0's decisions.

``test_kvcore_matches_vllm`` replays >= 200 random step traces, 40 op sequences, 40
sizing cases and 40 CUDA graph capture-size cases through vLLM's own core (one
``.venv-vllm`` process; skipped when that environment is absent; create it with
``scripts/setup_vllm_oracle.sh``) and through kvcore, and requires every line to
match. ``test_kvcore_matches_vllm_async`` replays the same >= 200 traces through
vLLM's ``AsyncScheduler`` behind its engine core's own batch queue (outputs applied a
step late) and through kvcore's ``AsyncScheduler`` and ``BatchQueue``. The seed is
fixed unless ``KVSIM_CONFORMANCE_SEED`` is set; a failure prints the seed, the first
differing step of both sides and the files holding the failing case.
``test_async_mutant_is_caught`` checks that a kvcore applying each output before the
next batch is scheduled fails the comparison with a readable diff. The other tests run
without vLLM.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from kvcore.replay import ReplayConfig
from kvcore.request import RequestStatus
from kvcore.scheduler import Scheduler
from sim.conformance import DEFAULT_SEED, generate
from sim.conformance.compare import first_line_diff
from sim.conformance.coverage import REQUIRED_ASYNC_FEATURES, REQUIRED_FEATURES, coverage
from sim.conformance.differential import DEFAULT_VLLM_PYTHON, run
from sim.conformance.generate import random_case
from sim.conformance.ops import random_ops_case, run_kvcore_ops
from sim.conformance.replay_kvcore import replay_config, run_kvcore_steps
from sim.conformance.sizing import random_sizing_case, run_kvcore_sizing

NUM_TRACES = 200
SEED = int(os.environ.get("KVSIM_CONFORMANCE_SEED", DEFAULT_SEED))
needs_vllm = pytest.mark.skipif(
    not DEFAULT_VLLM_PYTHON.exists(),
    reason="oracle environment .venv-vllm (vLLM 0.33.0) missing; "
    "create it with scripts/setup_vllm_oracle.sh",
)


@needs_vllm
def test_kvcore_matches_vllm(tmp_path: Path) -> None:
    out_dir = tmp_path / "failures"
    report = run(NUM_TRACES, SEED, str(DEFAULT_VLLM_PYTHON), out_dir)
    details = "\n".join(m.render() for m in report.mismatches[:3])
    assert report.ok, (
        f"seed {SEED} (rerun with KVSIM_CONFORMANCE_SEED={SEED}): "
        f"{len(report.mismatches)} mismatching cases, written to {out_dir}\n{details}"
    )
    assert report.vllm_version == "0.33.0"
    assert report.traces >= 200 and report.op_cases >= 40 and report.sizing_cases >= 40
    assert report.cudagraph_cases >= 40
    assert report.steps > 20 * report.traces


@needs_vllm
def test_kvcore_matches_vllm_async(tmp_path: Path) -> None:
    out_dir = tmp_path / "failures"
    report = run(
        NUM_TRACES,
        SEED,
        str(DEFAULT_VLLM_PYTHON),
        out_dir,
        num_op_cases=0,
        num_sizing_cases=0,
        async_scheduling=True,
    )
    details = "\n".join(m.render() for m in report.mismatches[:3])
    assert report.ok, (
        f"seed {SEED} (rerun with KVSIM_CONFORMANCE_SEED={SEED}): "
        f"{len(report.mismatches)} mismatching async cases, written to {out_dir}\n{details}"
    )
    assert report.vllm_version == "0.33.0" and report.async_scheduling
    assert report.traces >= 200
    assert report.steps > 20 * report.traces


def _mutation_demo():
    path = Path(__file__).with_name("mutation_demo.py")
    spec = importlib.util.spec_from_file_location("kvsim_mutation_demo", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_vllm
def test_async_mutant_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Applying each output before the next batch is scheduled (a synchronous loop over
    the AsyncScheduler) is caught, and the first mismatch names the step and fields.
    Only the batch queue is patched: it is plain Python, never compiled."""
    cls, attr, value = _mutation_demo().ASYNC_MUTANTS["apply-early"]
    monkeypatch.setattr(cls, attr, value)
    report = run(
        12,
        SEED,
        str(DEFAULT_VLLM_PYTHON),
        tmp_path,
        num_op_cases=0,
        num_sizing_cases=0,
        async_scheduling=True,
    )
    assert len(report.mismatches) >= 10, [m.render() for m in report.mismatches]
    text = report.mismatches[0].render()
    assert text.startswith("steps case 0: step ")
    assert "\n  vllm  : {" in text and "\n  kvcore: {" in text
    assert '"applied_step"' in text or '"in_flight"' in text, text
    assert "kvsim replay " in text and "--async-scheduling" in text


def _abort_keeps_blocks(self, request_ids, status):
    """A broken ``finish_requests``: the request leaves the queues, its blocks stay."""
    ended = []
    for rid in [request_ids] if isinstance(request_ids, str) else list(request_ids):
        request = self.requests.get(rid)
        if request is None or request.is_finished():
            continue
        if request.status == RequestStatus.RUNNING:
            self.running.remove(request)
        else:
            self.waiting.remove_requests([request])
        request.status = status
        self.finished_req_ids.add(rid)
        del self.requests[rid]
        ended.append(request)
    return ended


@needs_vllm
@pytest.mark.skipif(
    not hasattr(Scheduler.finish_requests, "__code__"), reason="kvcore.scheduler is compiled"
)
def test_abort_mutant_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An abort that does not give the request's blocks back is caught by the aborts
    of the generated cases."""
    monkeypatch.setattr(Scheduler, "finish_requests", _abort_keeps_blocks)
    report = run(30, SEED, str(DEFAULT_VLLM_PYTHON), tmp_path, num_op_cases=0, num_sizing_cases=0)
    assert len(report.mismatches) >= 3, [m.render() for m in report.mismatches]
    assert "free_blocks" in report.mismatches[0].render()


def test_cases_are_reproducible_and_valid() -> None:
    """The same (seed, index) gives the same case; kvcore accepts and finishes each."""
    for i in range(30):
        config, trace = random_case(SEED, i)
        assert (config, trace) == random_case(SEED, i)
        cfg = replay_config(config)
        assert isinstance(cfg, ReplayConfig)
        if not cfg.enable_chunked_prefill:
            assert cfg.max_num_batched_tokens >= max(
                cfg.max_model_len or 0, *(len(r["prompt_token_ids"]) for r in trace)
            )
        assert cfg.max_num_batched_tokens >= cfg.max_num_seqs
        lines = run_kvcore_steps(config, trace)
        assert not isinstance(lines, str), lines
        aborted = sum(len(x.get("aborted", ())) for x in lines if x["type"] == "step")
        assert lines[-1]["finished"] + aborted == len(trace)
    assert random_case(SEED, 0) != random_case(SEED + 1, 0)


def test_aborts_leave_other_cases_as_they_were(monkeypatch: pytest.MonkeyPatch) -> None:
    """Aborts come from their own stream: without them each case is what it was before
    aborts existed (same knobs, same requests); some cases have aborts, others not."""
    cases = [random_case(SEED, i) for i in range(40)]
    monkeypatch.setattr(generate, "ABORT_CASE_CHANCE", 0.0)
    with_aborts = 0
    for i, (config, trace) in enumerate(cases):
        keys = ("abort_step", "abort_in_step")
        plain = [{k: v for k, v in r.items() if k not in keys} for r in trace]
        assert (config, plain) == random_case(SEED, i)
        aborted = [(r, r.get("abort_step", r.get("abort_in_step"))) for r in trace]
        aborted = [(r, at) for r, at in aborted if at is not None]
        with_aborts += bool(aborted)
        assert all(at >= r["arrival_step"] for r, at in aborted)
        in_step = [r["abort_in_step"] for r in trace if "abort_in_step" in r]
        assert len(in_step) == len(set(in_step))
    assert 0 < with_aborts < 40


def test_cases_cover_every_listed_knob() -> None:
    """The 200 default traces exercise every knob and behaviour of the issue."""
    cases = []
    for i in range(NUM_TRACES):
        config, trace = random_case(SEED, i)
        cases.append((config, trace, run_kvcore_steps(config, trace)))
    counts = coverage(cases)
    missing = [f for f in REQUIRED_FEATURES if counts[f] == 0]
    assert not missing, f"seed {SEED}: no case covers {missing}"


def test_async_cases_cover_every_listed_knob_and_in_flight_behaviour() -> None:
    """The 200 async traces (same traces and knobs) cover the same knobs, and the
    behaviours only async scheduling has (tokens in flight at preemption, and so on)."""
    cases = []
    for i in range(NUM_TRACES):
        config, trace = random_case(SEED, i, async_scheduling=True)
        assert (config, trace) == (dict(random_case(SEED, i)[0], async_scheduling=True), trace)
        cases.append((config, trace, run_kvcore_steps(config, trace)))
    assert not [c for c in cases if isinstance(c[2], str)]
    counts = coverage(cases)
    missing = [f for f in REQUIRED_FEATURES + REQUIRED_ASYNC_FEATURES if counts[f] == 0]
    assert not missing, f"seed {SEED}: no async case covers {missing}"


def test_op_and_sizing_cases_run_on_kvcore() -> None:
    for i in range(10):
        config, ops = random_ops_case(SEED, i)
        lines = run_kvcore_ops(config, ops)
        assert not isinstance(lines, str), lines
        assert len(lines) == len(ops) + 1
        result = run_kvcore_sizing(random_sizing_case(SEED, i))
        assert result is None or result["num_blocks"] > 0


def test_first_line_diff_names_only_the_differing_fields() -> None:
    base = {
        "type": "step",
        "step": 3,
        "free_blocks": 5,
        "preempted": [],
        "scheduled": [{"id": "a", "n": 4}, {"id": "b", "n": 1}],
    }
    other = dict(base, free_blocks=6, scheduled=[{"id": "a", "n": 4}, {"id": "b", "n": 2}])
    header = {"type": "header"}
    diff = first_line_diff([header, base], [header, other], "step", "step")
    assert diff is not None and diff.where == "step 3"
    assert diff.vllm == {"free_blocks": 5, "scheduled": [{"id": "b", "n": 1}]}
    assert diff.kvcore == {"free_blocks": 6, "scheduled": [{"id": "b", "n": 2}]}
    assert first_line_diff([base], [base], "step", "step") is None
    assert first_line_diff([base, base], [base], "step", "step").where == "number of step lines"
