"""Benchmark workloads: a fixed prompt pool, load stages, client timeouts (the spec
and the workload side, driven by a fake engine that finishes every request a fixed
time after it arrives)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import simpy
import yaml

from workloads import WorkloadError, load_workload
from workloads.staged import StagedWorkload

BASE: dict[str, Any] = {"prompt_len": 40, "output_len": 8, "seed": 3}


def _load(tmp_path: Path, data: dict[str, Any], name: str = "w.yaml") -> Any:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({**BASE, **data}, sort_keys=False))
    return load_workload(path)


def _drive(workload: Any, service_s: float = 1.0, until: float = 1e4) -> list[Any]:
    """Submit into a fake engine that finishes each request ``service_s`` after it
    arrives; return ``(time, request)`` of every submit."""
    env = simpy.Environment()
    sent: list[Any] = []

    def submit(req: Any) -> None:
        sent.append((env.now, req))
        env.timeout(service_s).callbacks.append(
            lambda _e, rid=req.request_id: workload.on_finish(rid, [], env.now)
        )

    workload.start(env, submit)
    env.run(until=until)
    assert workload.done()
    return sent


def test_pool_fixed_order_cycles_and_repeats_identical_prompts(tmp_path: Path) -> None:
    pool = _load(tmp_path, {"arrival": {"type": "constant", "rate": 10}, "num_requests": 10,
                            "prompt_pool": {"size": 4, "order": "fixed"}})  # fmt: skip
    plain = _load(tmp_path, {"arrival": {"type": "constant", "rate": 10}, "num_requests": 4},
                  "plain.yaml")  # fmt: skip
    assert isinstance(pool, StagedWorkload)
    sent = [r for _, r in _drive(pool)]
    first = [r for _, r in _drive(plain)]
    assert len(sent) == 10
    for k, req in enumerate(sent):
        want = first[k % 4]  # pool prompt i is what request i of the plain spec sends
        assert req.prompt_token_ids == want.prompt_token_ids
        assert req.max_tokens == want.max_tokens
    assert len({tuple(r.prompt_token_ids) for r in sent}) == 4


def test_pool_shuffled_is_a_fresh_permutation_each_cycle(tmp_path: Path) -> None:
    spec = {"arrival": {"type": "constant", "rate": 10}, "num_requests": 48,
            "prompt_pool": {"size": 8, "order": "shuffled"}}  # fmt: skip
    sent = [tuple(r.prompt_token_ids) for _, r in _drive(_load(tmp_path, spec))]
    cycles = [sent[i : i + 8] for i in range(0, 48, 8)]
    assert all(len(set(c)) == 8 for c in cycles)
    assert all(set(c) == set(cycles[0]) for c in cycles)
    assert len({tuple(c) for c in cycles}) > 1  # reshuffled
    again = [tuple(r.prompt_token_ids) for _, r in _drive(_load(tmp_path, spec, "b.yaml"))]
    assert again == sent


def test_pool_random_samples_with_replacement(tmp_path: Path) -> None:
    spec = {"arrival": {"type": "constant", "rate": 10}, "num_requests": 40,
            "prompt_pool": {"size": 20, "order": "random"}}  # fmt: skip
    sent = [tuple(r.prompt_token_ids) for _, r in _drive(_load(tmp_path, spec))]
    assert len(set(sent[:20])) < 20  # some prompt twice within one pool's worth
    assert len(set(sent)) <= 20
    other = [tuple(r.prompt_token_ids) for _, r in _drive(_load(tmp_path, {**spec, "seed": 4}))]
    assert other != sent


def test_pool_groups_share_their_system_prompt(tmp_path: Path) -> None:
    groups = {"num_groups": 3, "num_prompts_per_group": 2, "system_prompt_len": 30,
              "question_len": 5, "output_len": 7}  # fmt: skip
    data = {"arrival": {"type": "constant", "rate": 10}, "num_requests": 6,
            "prompt_pool": {"groups": groups}}  # fmt: skip
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"seed": 1, **data}))
    sent = [r for _, r in _drive(load_workload(path))]
    assert [r.num_prompt_tokens for r in sent] == [35] * 6
    assert [r.max_tokens for r in sent] == [7] * 6
    heads = [tuple(r.prompt_token_ids[:30]) for r in sent]
    assert heads[0] == heads[1] and heads[2] == heads[3] and heads[4] == heads[5]
    assert len(set(heads)) == 3
    assert sent[0].prompt_token_ids[30:] != sent[1].prompt_token_ids[30:]


def test_stages_back_to_back_and_after_drain(tmp_path: Path) -> None:
    stages = [
        {"arrival": {"type": "constant", "rate": 10}, "num_requests": 5},
        {"arrival": {"type": "burst"}, "num_requests": 3, "start": "after_drain"},
        {"arrival": {"type": "constant", "rate": 2}, "duration_s": 2.0},
        {"arrival": {"type": "closed_loop", "concurrency": 2}, "duration_s": 2.5},
    ]
    sent = _drive(_load(tmp_path, {"stages": stages}), service_s=1.0)
    times = [round(t, 6) for t, _ in sent]
    # stage 0: 0.0 .. 0.4; drained at 1.4 (last finish); stage 1 bursts then
    assert times[:5] == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert times[5:8] == [1.4, 1.4, 1.4]
    # stage 2 starts at once (back to back): 1.4, 1.9 .. below 3.4
    assert times[8:12] == [1.4, 1.9, 2.4, 2.9]
    # stage 3 (closed loop, 2 clients, 1 s each) from 3.4 for 2.5 s
    assert times[12:] == [3.4, 3.4, 4.4, 4.4, 5.4, 5.4]
    assert [r.request_id for _, r in sent] == [f"req-{i}" for i in range(len(sent))]


def test_stage_delay_pauses_after_the_start_condition(tmp_path: Path) -> None:
    stages = [
        {"arrival": {"type": "burst"}, "num_requests": 2},
        {"arrival": {"type": "burst"}, "num_requests": 1, "start": "after_drain",
         "delay_s": 2.5},
        {"arrival": {"type": "burst"}, "num_requests": 1, "delay_s": 0.5},
    ]  # fmt: skip
    times = [t for t, _ in _drive(_load(tmp_path, {"stages": stages}), service_s=1.0)]
    assert times == [0.0, 0.0, 3.5, 4.0]  # drained at 1.0, + 2.5; then + 0.5


def test_stage_and_workload_timeouts_travel_with_requests(tmp_path: Path) -> None:
    stages = [
        {"arrival": {"type": "constant", "rate": 10}, "num_requests": 2},
        {"arrival": {"type": "constant", "rate": 10}, "num_requests": 2, "timeout_s": 9.5},
    ]
    workload = _load(tmp_path, {"stages": stages, "timeout_s": 3.0})
    assert workload.has_timeouts and workload.num_requests == 4
    assert [r.timeout_s for _, r in _drive(workload)] == [3.0, 3.0, 9.5, 9.5]
    plain = _load(tmp_path, {"arrival": {"type": "poisson", "rate": 5}, "num_requests": 3},
                  "plain.yaml")  # fmt: skip
    assert not plain.has_timeouts
    assert [r.timeout_s for _, r in _drive(plain)] == [None] * 3


def test_after_drain_counts_aborted_and_closed_loop_goes_on(tmp_path: Path) -> None:
    """An aborted request leaves its stage like a finished one; a closed-loop client
    whose request was aborted sends its next one."""
    stages = [
        {"arrival": {"type": "closed_loop", "concurrency": 1}, "num_requests": 3},
        {"arrival": {"type": "burst"}, "num_requests": 1, "start": "after_drain"},
    ]
    workload = _load(tmp_path, {"stages": stages})
    env = simpy.Environment()
    sent: list[tuple[float, str]] = []

    def submit(req: Any) -> None:
        sent.append((env.now, req.request_id))
        env.timeout(2.0).callbacks.append(
            lambda _e, rid=req.request_id: workload.on_abort(rid, env.now)
        )

    workload.start(env, submit)
    env.run()
    assert sent == [(0.0, "req-0"), (2.0, "req-1"), (4.0, "req-2"), (6.0, "req-3")]


def test_unstaged_spec_dumps_as_before(tmp_path: Path) -> None:
    """The resolved configuration of a workload without the new fields has none of
    their keys (config.yaml of such runs is unchanged)."""
    workload = _load(tmp_path, {"arrival": {"type": "poisson", "rate": 5}, "num_requests": 3})
    assert not {"prompt_pool", "stages", "timeout_s"} & set(workload.spec)
    staged = _load(tmp_path, {"stages": [{"arrival": {"type": "burst"}, "num_requests": 2}]},
                   "s.yaml")  # fmt: skip
    assert staged.spec["stages"][0]["num_requests"] == 2 and "timeout_s" not in staged.spec


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"arrival": {"type": "poisson", "rate": 1}, "num_requests": 3,
             "stages": [{"arrival": {"type": "poisson", "rate": 1}, "num_requests": 2}]},
            "w.yaml: with stages, give arrival and num_requests or duration_s in each stage",
        ),
        (
            {"stages": [{"arrival": {"type": "poisson", "rate": 1}, "num_requests": 2,
                         "start": "later"}]},
            "w.yaml: stages[0].start: Input should be 'after_previous' or 'after_drain' "
            "(got 'later')",
        ),
        (
            {"stages": [{"arrival": {"type": "poisson", "rate": 1}}]},
            "w.yaml: stages[0]: give exactly one of num_requests and duration_s",
        ),
        (
            {"arrival": {"type": "poisson", "rate": 1}, "num_requests": 3,
             "prompt_pool": {"size": 3, "order": "sorted"}},
            "w.yaml: prompt_pool.order: Input should be 'fixed', 'shuffled' or 'random'",
        ),
        (
            {"arrival": {"type": "poisson", "rate": 1}, "num_requests": 3,
             "prompt_pool": {"order": "fixed"}},
            "w.yaml: prompt_pool: give exactly one of size and groups",
        ),
        (
            {"arrival": {"type": "poisson", "rate": 1}, "num_requests": 3, "timeout_s": 0},
            "w.yaml: timeout_s: must be > 0 (got 0)",
        ),
        (
            {"arrival": {"type": "poisson", "rate": 1}, "num_requests": 3,
             "sessions": {"turns": 2}, "prompt_pool": {"size": 2}},
            "w.yaml: prompt_pool sends single requests: leave out sessions",
        ),
        ({}, "w.yaml: give arrival (or stages)"),
    ],
)  # fmt: skip
def test_bad_bench_fields_name_file_and_field(
    tmp_path: Path, data: dict[str, Any], message: str
) -> None:
    with pytest.raises(WorkloadError) as info:
        _load(tmp_path, data)
    assert str(info.value).replace(str(tmp_path) + "/", "").startswith(message)


def test_overrides_refuse_a_staged_workload(tmp_path: Path) -> None:
    from workloads import WorkloadOverrides

    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump({**BASE, "stages": [{"arrival": {"type": "burst"}, "num_requests": 2}]})
    )
    with pytest.raises(WorkloadError, match="s.yaml: stages: --rate, --num-requests"):
        load_workload(path, overrides=WorkloadOverrides(rate=2.0))
