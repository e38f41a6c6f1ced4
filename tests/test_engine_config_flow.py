"""One engine configuration from the edge down: every command builds it the same way
from the engine flags it declares, and the KV budget reads its fields by name, so a
field reaches the budget with no keyword list in between to forget it."""

from __future__ import annotations

import importlib
import inspect
from dataclasses import asdict
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

import calibrate.budget
import sim.app.engine_config
from kvcore.replay import ReplayConfig
from sim.app.engine_config import EngineConfig
from sim.cli import app
from sim.cli.options import ENGINE_FLAGS

GROUP = get_command(app)

GIVEN: dict[str, tuple[list[str], Any]] = {
    "block_size": (["--block-size", "32"], 32),
    "gpu_memory_utilization": (["--gpu-memory-utilization", "0.5"], 0.5),
    "num_gpu_blocks_override": (["--num-gpu-blocks-override", "900"], 900),
    "max_num_seqs": (["--max-num-seqs", "24"], 24),
    "max_num_batched_tokens": (["--max-num-batched-tokens", "4096"], 4096),
    "max_model_len": (["--max-model-len", "3000"], 3000),
    "tensor_parallel_size": (["--tensor-parallel-size", "2"], 2),
    "data_parallel_size": (["--data-parallel-size", "2"], 2),
    "enable_expert_parallel": (["--enable-expert-parallel"], True),
    "enforce_eager": (["--enforce-eager"], True),
    "long_prefill_token_threshold": (["--long-prefill-token-threshold", "64"], 64),
    "enable_chunked_prefill": (["--no-enable-chunked-prefill"], False),
    "enable_prefix_caching": (["--no-enable-prefix-caching"], False),
    "scheduling_policy": (["--scheduling-policy", "priority"], "priority"),
    "kv_cache_dtype": (["--kv-cache-dtype", "fp8"], "fp8"),
    "latency_model": (["--latency-model", "constant"], "constant"),
    "constant_step_s": (["--constant-step-s", "0.02"], 0.02),
    "async_scheduling": (["--no-async-scheduling"], False),
    "kv_offloading_size": (["--kv-offloading-size", "4"], 4.0),
    "speculative_config": (
        ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}'],
        '{"method": "ngram", "num_speculative_tokens": 3}',
    ),
}
"""A value other than the default for each engine flag, and the field's value it gives."""


class Stop(ValueError):
    """Raised by the stand-in builder once it has seen what the command passed."""


def _declared(command: str) -> list[str]:
    return [p.name for p in GROUP.commands[command].params if p.name in ENGINE_FLAGS]


def test_the_table_gives_every_engine_flag():
    assert set(GIVEN) == set(ENGINE_FLAGS)


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        (["run"], ["chat"]),
        (["budget"], []),
        (["autoscale"], ["chat"]),
        (["calibrate"], ["--from-trace", "requests.jsonl", "--out", "{tmp}/e.yaml"]),
    ],
)
def test_each_command_builds_its_engine_from_every_flag_it_declares(
    command, argv, monkeypatch, tmp_path
):
    """run, budget, autoscale and calibrate --from-trace hand every engine flag they
    declare, given, to sim.app.engine_config.load_engine_config (and nothing else)."""
    seen: list[dict[str, Any]] = []

    def stand_in(path, overrides, defaults=None, *, checked=True):
        seen.append({k: v for k, v in overrides.items() if v is not None})
        raise Stop("stop")

    modules = (
        "sim.app.engine_config",
        "sim.app.run_command",
        "sim.app.budget_command",
        "calibrate.trace_fit.cli",
    )
    for module in modules:  # imported first: a module imported while the function is
        importlib.import_module(module)  # patched would keep the stand-in for good
    for module in modules:
        monkeypatch.setattr(f"{module}.load_engine_config", stand_in)
    declared = _declared(command[0])
    assert declared, command
    flags = [arg for field in declared for arg in GIVEN[field][0]]
    args = [*command, *(a.replace("{tmp}", str(tmp_path)) for a in argv), *flags]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert seen == [{field: GIVEN[field][1] for field in declared}]


def test_plan_sets_every_engine_flag_it_declares(monkeypatch):
    import sim.plan.cli
    from sim.plan.spec import PlanError

    seen: dict[str, Any] = {}

    def stand_in(path, overrides):
        seen.update({k: v for k, v in overrides.items() if v is not None})
        raise PlanError("stop")

    monkeypatch.setattr(sim.plan.cli, "load_plan", stand_in)
    declared = _declared("plan")
    assert set(declared) == set(ENGINE_FLAGS)
    flags = [arg for field in declared for arg in GIVEN[field][0]]
    res = CliRunner().invoke(app, ["plan", "--question", "max_rate", *flags])
    assert res.exit_code == 2, res.output
    engine = {k.removeprefix("engine."): v for k, v in seen.items() if k.startswith("engine.")}
    assert engine == {field: GIVEN[field][1] for field in declared}


def test_replay_options_are_the_replay_configs_fields():
    """kvsim replay hands its options on by name: each is a ReplayConfig field."""
    names = {p.name for p in GROUP.commands["replay"].params} - {"ctx", "trace", "out"}
    assert names == set(asdict(ReplayConfig()))


def test_budget_and_run_build_the_engine_the_same_way():
    flags = {field: GIVEN[field][1] for field in calibrate.budget.budget_engine_args()}
    checked = sim.app.engine_config.load_engine_config(None, flags)
    unchecked = sim.app.engine_config.load_engine_config(None, flags, checked=False)
    assert unchecked == checked and isinstance(unchecked, EngineConfig)


def test_a_new_engine_field_reaches_the_kv_budget(monkeypatch):
    """An engine argument added to the budget function (a parameter) and to the engine
    configuration (a field) reaches the budget of a resolved run, though nothing between
    the run's setup and the budget names it."""
    from sim.app.run import RunSpec
    from sim.app.setup import resolve_run

    original = calibrate.budget.compute_kv_budget
    received: list[int] = []

    def with_new_argument(*args: Any, kv_reserve_blocks: int = 0, **kwargs: Any) -> Any:
        received.append(kv_reserve_blocks)
        return original(*args, **kwargs)

    params = list(inspect.signature(original).parameters.values())
    new = inspect.Parameter(
        "kv_reserve_blocks", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=0, annotation=int
    )
    first_keyword_only = next(i for i, p in enumerate(params) if p.kind is p.KEYWORD_ONLY)
    params.insert(first_keyword_only, new)
    with_new_argument.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    monkeypatch.setattr(calibrate.budget, "compute_kv_budget", with_new_argument)
    assert calibrate.budget.budget_engine_args()[-1] == "kv_reserve_blocks"

    class NewEngine(EngineConfig):
        kv_reserve_blocks: int = 0

    engine = NewEngine(kv_reserve_blocks=7, max_model_len=4096, latency_model="constant")
    resolved = resolve_run(RunSpec(workload="chat", engine=engine))
    assert received == [7]
    assert resolved.engine is engine and resolved.max_model_len == 4096
