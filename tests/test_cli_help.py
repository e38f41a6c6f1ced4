"""Every ``kvsim`` command documents itself: each option and argument has a help line
and shows its default in ``--help``; on/off flags show as ``--flag/--no-flag`` with no
``<bool>`` type; the defaults ``kvsim plan`` shows are the plan spec's own."""

from __future__ import annotations

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from sim.app.engine_config import EngineConfig
from sim.cli import PLAN_PATHS, app
from sim.cli.options import ENGINE_FLAGS
from sim.plan.spec import PlanSpec

GROUP = get_command(app)
COMMANDS = sorted(GROUP.commands)


def _params(name: str) -> list:
    return [p for p in GROUP.commands[name].params if p.name != "ctx"]


def _is_switch(param) -> bool:
    """A plain on/off switch (``--force``): off unless given, so it shows no default."""
    return bool(getattr(param, "is_flag", False)) and not param.secondary_opts


def test_the_walk_finds_the_commands_and_their_options():
    assert {"run", "plan", "sweep", "budget", "list", "calibrate"} <= set(COMMANDS)
    assert len(_params("run")) > 25 and len(_params("plan")) > 25


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_has_help_and_a_default(name):
    missing = []
    for param in _params(name):
        label = f"{name} {param.opts[0] if param.opts else param.name}"
        text = getattr(param, "help", None) or ""
        if not text.strip():
            missing.append(f"{label}: no help")
        if "[" in text:
            # rich markup would swallow "[...]" in the rendered help
            missing.append(f"{label}: '[' in help")
        if param.required or (_is_switch(param) and param.default is False):
            continue
        shown = param.show_default
        if not (isinstance(shown, str) and shown) and (param.default is None or shown is False):
            missing.append(f"{label}: no default shown")
    assert not missing, "; ".join(missing)


@pytest.mark.parametrize("name", COMMANDS)
def test_help_renders_without_bool_types(name):
    res = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "200"}, prog_name="kvsim")
    if name == "replay":  # its own knobs: kvsim replay passes --help on
        return
    assert res.exit_code == 0, res.output
    assert "<bool>" not in res.output
    for param in _params(name):
        if getattr(param, "secondary_opts", None):
            assert param.secondary_opts[0] in res.output  # --no-... shown beside --flag


def test_run_help_shows_engine_defaults_and_vllm_meaning():
    res = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "250"}, prog_name="kvsim")
    out = res.output
    for field, (decl, text) in ENGINE_FLAGS.items():
        assert decl.split("/")[0] in out, field
        assert text.split(":")[0][:30] in out, field
    assert "[default: 16]" in out and "[default: 0.92]" in out and "[default: chat]" in out
    assert "[default: enable-prefix-caching]" in out


def _plan_default(path: str):
    model: type = PlanSpec
    parts = path.split(".")
    for part in parts[:-1]:
        field = model.model_fields[part]
        model = field.default_factory().__class__ if field.default_factory else field.annotation
    field = model.model_fields[parts[-1]]
    return field.default_factory() if field.default_factory else field.default


def test_plan_defaults_are_the_plan_specs():
    by_name = {p.name: p for p in _params("plan")}
    checked = 0
    for name, path in PLAN_PATHS.items():
        param = by_name[name]
        if param.default is None:
            continue  # a derived default, shown as text
        assert param.default == _plan_default(path), name
        checked += 1
    assert by_name["num_seeds"].default == len(_plan_default("seeds"))
    for field in ENGINE_FLAGS:
        if field in by_name and by_name[field].default is not None:
            assert by_name[field].default == EngineConfig.model_fields[field].default, field
            checked += 1
    assert checked > 15


def test_a_flag_left_at_its_default_does_not_replace_the_plan_files(tmp_path, monkeypatch):
    """--max-probes shows 12, but a plan file's 5 stays unless --max-probes is given."""
    from sim.plan.spec import load_plan

    seen = {}

    def fake(path, out, overrides, force=False):
        seen.update(load_plan(path, overrides).search.model_dump())
        return 0

    monkeypatch.setattr("sim.plan.cli.plan_command", fake)
    plan = tmp_path / "plan.yaml"
    plan.write_text("question: max_rate\nslo: {ttft_p90_s: 1}\nsearch: {max_probes: 5}\n")
    assert CliRunner().invoke(app, ["plan", str(plan)]).exit_code == 0
    assert seen["max_probes"] == 5
    assert CliRunner().invoke(app, ["plan", str(plan), "--max-probes", "7"]).exit_code == 0
    assert seen["max_probes"] == 7


@pytest.mark.parametrize("name", COMMANDS)
def test_a_command_alone_parses_and_helps_as_in_the_whole_app(name):
    """``kvsim COMMAND ...`` runs an app holding that command alone (sim.cli._app_for):
    the same help, and the same message for a bad option."""
    from sim.cli import _app_for

    alone = _app_for([name, "--help"])
    assert alone is not app
    assert sorted(get_command(alone).commands) == [name]
    runner = CliRunner()
    for args in ([name, "--help"], [name, "--no-such-option"]):
        whole = runner.invoke(app, args, env={"COLUMNS": "120"})
        one = runner.invoke(alone, args, env={"COLUMNS": "120"})
        assert (one.exit_code, one.output) == (whole.exit_code, whole.output), args


def test_the_group_itself_is_the_whole_app():
    from sim.cli import _app_for

    assert _app_for([]) is app
    assert _app_for(["--help"]) is app
    assert _app_for(["no-such-command"]) is app
