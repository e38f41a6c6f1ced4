"""``kvsim recommend`` on the command line: bad input is one message and exit 2, the
options' defaults are the spec's, options given replace the file's values."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from sim.cli import app
from sim.recommend.cli import overrides_from
from sim.recommend.command import RECOMMEND_PATHS
from sim.recommend.spec import RecommendError, RecommendSpec, load_recommend

GOOD = "slo: {ttft_p90_s: 1}\ntarget_rate: 10\n"


def _invoke(*args: str):
    return CliRunner().invoke(app, ["recommend", *args], prog_name="kvsim")


def _bad(res, *needles: str) -> None:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert "kvsim: error:" in res.output
    for needle in needles:
        assert needle in res.output, res.output


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("target_rate: 10\n", ["slo"]),
        (GOOD + "space: {gpus: [H100-SXM], max_num_seqs: [0]}\n", ["max_num_seqs", ">= 1"]),
        (GOOD + "space: {gpus: [H100-SXM, H100-SXM]}\n", ["gpus", "distinct"]),
        (GOOD + "space: {gpus: [NoSuchGPU]}\n", ["NoSuchGPU", "known:"]),
        (GOOD + "router: fastest\n", ["router", "round_robin"]),
        (GOOD + "objective: cheapest\n", ["objective"]),
        ("slo: {ttft_p90_s: 1}\nobjective: cost\n", ["cost needs target_rate"]),
        (GOOD + "prices: {H100-SXM: -1}\n", ["prices"]),
        (GOOD + "prices: missing-prices.yaml\n", ["missing-prices.yaml"]),
        (GOOD + "workload: examples/chat-trace.jsonl\n", ["trace has no rate"]),
        (GOOD + "colour: blue\n", ["colour"]),
        ("slo: [1\n", ["YAML syntax error"]),
    ],
)
def test_a_bad_spec_is_one_message_and_exit_2(tmp_path: Path, text: str, needles: list[str]):
    spec = tmp_path / "rec.yaml"
    spec.write_text(text)
    _bad(_invoke(str(spec), "--dry-run"), str(spec), *needles)


def test_bad_options_name_the_option(tmp_path: Path) -> None:
    _bad(_invoke("--ttft-p90-s", "1", "--max-num-seqs", "64,many", "--dry-run"), "--max-num-seqs")
    _bad(_invoke("--ttft-p90-s", "1", "--enable-prefix-caching", "maybe"), "true or false")
    _bad(_invoke("--ttft-p90-s", "1", "--gpus", "H100-SXM,", "--dry-run"), "--gpus")
    _bad(_invoke("--ttft-p90-s", "1", "--jobs", "0"), "--jobs")
    _bad(_invoke(str(tmp_path / "absent.yaml")), "cannot read")


def test_an_output_directory_kvsim_did_not_write_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    res = _invoke("--ttft-p90-s", "1", "--target-rate", "5", "--out", str(out))
    _bad(res, "notes.txt", "--force")
    assert (out / "notes.txt").read_text() == "mine"


def test_options_given_replace_the_files_values(tmp_path: Path) -> None:
    spec = tmp_path / "rec.yaml"
    spec.write_text(GOOD + "space: {gpus: [A100-80GB], max_num_seqs: [64]}\ntop: 2\n")
    values = dict.fromkeys(RECOMMEND_PATHS)
    values.update(gpus="H100-SXM,H200", tensor_parallel_size="2,4", num_seeds=3)
    got = load_recommend(str(spec), overrides_from(values))
    assert got.space.gpus == ["H100-SXM", "H200"]
    assert got.space.tensor_parallel_size == [2, 4]
    assert got.space.max_num_seqs == [64] and got.top == 2  # not given: the file's
    assert got.search.seeds == [0, 1, 2]
    with pytest.raises(RecommendError, match="--max-num-seqs"):
        overrides_from({"max_num_seqs": "1,x"})


def _spec_default(path: str):
    model: type = RecommendSpec
    parts = path.split(".")
    for part in parts[:-1]:
        field = model.model_fields[part]
        model = field.default_factory().__class__ if field.default_factory else field.annotation
    field = model.model_fields[parts[-1]]
    value = field.default_factory() if field.default_factory else field.default
    return value


def test_option_defaults_are_the_specs() -> None:
    params = {p.name: p for p in get_command(app).commands["recommend"].params}
    checked = 0
    for name, path in RECOMMEND_PATHS.items():
        param = params[name]
        if param.default is None:
            continue  # shown as text: the spec's derived default
        default = _spec_default(path)
        if path == "search.length.max_factor":
            default = RecommendSpec.model_fields["search"].default_factory().length.max_factor
        assert param.default == default, name
        checked += 1
    assert params["num_seeds"].default == len(_spec_default("search.seeds"))
    assert checked >= 10


def test_the_recommend_page_names_every_option() -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "recommend.md").read_text()
    for param in get_command(app).commands["recommend"].params:
        if param.opts and param.opts[0].startswith("--"):
            assert f"`{param.opts[0]}" in page, param.opts[0]
