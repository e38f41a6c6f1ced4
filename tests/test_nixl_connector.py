"""kvcore's scheduler with the P/D connector (kvcore.nixl_connector): a prefill
instance keeps a finished request's blocks until the decode side has read them (or
its lease ran out), a decode instance waits for the prompt's KV and then decodes, a
failed load fails the request or is recomputed, and the layouts and combinations
kvcore does not model are refused. (Step-by-step agreement with vLLM 0.33.0 is checked
by tests/conformance/test_pd_differential.py.)"""

from __future__ import annotations

import pytest

from kvcore.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from kvcore.nixl_connector import NixlConnectorScheduler
from kvcore.scheduler import Scheduler
from sim.conformance.pd import KvcoreReplay
from sim.conformance.pd_cases import random_case

PROMPT = list(range(100, 140))  # 2.5 blocks of 16 tokens
D_PARAMS = {
    "do_remote_prefill": True,
    "do_remote_decode": False,
    "remote_block_ids": [[1, 2, 3]],
    "remote_engine_id": "p",
    "remote_request_id": "p0",
    "remote_host": "localhost",
    "remote_port": 5600,
    "tp_size": 1,
}


def _steps(config: dict, trace: list[dict]) -> list[dict]:
    return [
        x for x in KvcoreReplay(dict(config, num_gpu_blocks=20), trace).run() if x["type"] == "step"
    ]


def _request(**kw: object) -> dict:
    return {"request_id": "r0", "arrival_step": 0, "prompt_token_ids": PROMPT, **kw}


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_prefill_instance_holds_the_blocks_until_the_decode_side_read_them(
    async_scheduling: bool,
) -> None:
    trace = [_request(max_tokens=1, xfer_steps=3, kv_transfer_params={"do_remote_decode": True})]
    steps = _steps({"role": "prefill", "async_scheduling": async_scheduling}, trace)
    (fin,) = [s for s in steps if s["finished"]]
    params = fin["params"]["r0"]
    assert params["do_remote_prefill"] and params["remote_request_id"] == "r0"
    assert params["remote_num_tokens"] == 40 and len(params["remote_block_ids"][0]) == 3
    assert params["remote_prefill_cached_tokens"] == 0
    held = [s["step"] for s in steps if s["held"] == ["r0"]]
    (send,) = [s["step"] for s in steps if s.get("meta") and s["meta"]["send"]]
    (read,) = [s["step"] for s in steps if s.get("report") and s["report"]["sending"]]
    assert read == send + 2 and held[0] == fin["step"]
    assert steps[-1]["free_blocks"] == 19 and not steps[-1]["held"]


def test_an_unread_lease_runs_out() -> None:
    trace = [_request(max_tokens=1, read=False, kv_transfer_params={"do_remote_decode": True})]
    steps = _steps({"role": "prefill", "lease_steps": 5}, trace)
    (send,) = [s["step"] for s in steps if s["meta"]["send"]]
    (gone,) = [s["step"] for s in steps if s["report"]["sending"]]
    assert gone == send + 4


def test_an_aborted_prefill_request_is_freed_at_once() -> None:
    trace = [_request(max_tokens=5, abort_step=1, kv_transfer_params={"do_remote_decode": True})]
    steps = _steps({"role": "prefill"}, trace)
    assert steps[1]["aborted"] == ["r0"] and not steps[1]["held"]
    assert steps[1]["meta"]["not_processed"] == ["r0"] and not steps[1]["meta"]["send"]


@pytest.mark.parametrize("mode", ["pull", "push"])
def test_a_decode_instance_waits_for_the_prompt_then_decodes(mode: str) -> None:
    trace = [_request(max_tokens=3, xfer_steps=2, kv_transfer_params=dict(D_PARAMS))]
    steps = _steps({"role": "decode", "mode": mode}, trace)
    assert steps[0]["scheduled"] == [] and steps[0]["waiting_for_kv"] == ["r0"]
    recv = steps[0]["meta"]["recv"]
    assert recv[0][:2] == ["r0", [1, 2, 3]] and recv[0][3] == (mode == "pull")
    assert steps[1]["report"]["recving"] == ["r0"]
    # The whole prompt was loaded: only its last token is computed, to sample.
    assert steps[2]["scheduled"] == [{"id": "r0", "n": 1}]
    assert [s["step"] for s in steps if s["finished"]] == [4]


@pytest.mark.parametrize("policy", ["fail", "recompute"])
def test_a_failed_load_fails_the_request_or_is_recomputed(policy: str) -> None:
    trace = [_request(max_tokens=2, fail_load=True, kv_transfer_params=dict(D_PARAMS))]
    steps = _steps({"role": "decode", "kv_load_failure_policy": policy}, trace)
    assert steps[0]["report"]["failed"] == ["r0"] and steps[0]["report"]["invalid"] == [1, 2, 3]
    if policy == "fail":
        assert steps[0]["finished"] == ["r0"]
        assert not any(s["scheduled"] for s in steps) and steps[-1]["free_blocks"] == 19
    else:
        assert steps[1]["scheduled"] == [{"id": "r0", "n": 40}]


def test_unmodelled_layouts_are_refused() -> None:
    full = KVCacheGroupSpec(["a"], FullAttentionSpec(block_size=16))
    swa = KVCacheGroupSpec(["b"], SlidingWindowSpec(block_size=16, sliding_window=32))
    for groups in ([full, full], [swa]):
        config = KVCacheConfig(num_blocks=10, kv_cache_tensors=[], kv_cache_groups=groups)
        with pytest.raises(ValueError, match="one full-attention KV group"):
            NixlConnectorScheduler(config, "kv_consumer")
    config = KVCacheConfig(num_blocks=10, kv_cache_tensors=[], kv_cache_groups=[full])
    with pytest.raises(ValueError, match="kv_role"):
        NixlConnectorScheduler(config, "kv_sideways")  # type: ignore[arg-type]


@pytest.mark.parametrize("role", ["prefill", "decode"])
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_scheduler_invariants_hold_in_random_cases(
    role: str, async_scheduling: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``check_invariants`` after every schedule() and update: blocks held for the
    decode side and blocks whose free is deferred are accounted for."""
    schedule, update = Scheduler.schedule, Scheduler.update_from_output

    def checked_schedule(self: Scheduler):  # noqa: ANN202
        out = schedule(self)
        self.check_invariants()
        return out

    def checked_update(self: Scheduler, *args, **kwargs):  # noqa: ANN202
        result = update(self, *args, **kwargs)
        self.check_invariants()
        return result

    monkeypatch.setattr(Scheduler, "schedule", checked_schedule)
    monkeypatch.setattr(Scheduler, "update_from_output", checked_update)
    for i in range(25):
        KvcoreReplay(*random_case(1, i, role, async_scheduling)).run()
