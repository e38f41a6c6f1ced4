"""The YAML workload spec: presets, shorthands, the loader, and bad inputs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from workloads import (
    WorkloadError,
    expected_prefix_hit_fraction,
    list_presets,
    load_spec,
    load_workload,
    preset_description,
)
from workloads.loader import PRESET_DIR
from workloads.spec import WorkloadSpec

DATA = Path(__file__).parent / "data" / "workloads"
BASE = """\
arrival: {type: poisson, rate: 2}
prompt_len: 100
output_len: 20
num_requests: 10
"""


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_presets_all_load():
    names = list_presets()
    assert names == ["agent", "chat", "code", "long-context", "offline-batch", "rag"]
    for name in names:
        workload = load_workload(name)
        assert workload.name == name
        assert workload.num_requests and workload.num_requests > 0
        assert workload.spec["source"] == f"preset:{name}"
        assert preset_description(name)


def test_chat_preset_defaults():
    spec = load_spec(PRESET_DIR / "chat.yaml")
    assert spec.arrival.type == "poisson" and spec.arrival.rate == 8.0
    assert spec.num_requests == 1000
    mu, sigma = spec.prompt_len.mu_sigma()
    assert math.exp(mu) == pytest.approx(200)


def test_rag_expected_prefix_hit_fraction():
    spec = load_spec(PRESET_DIR / "rag.yaml")
    got = expected_prefix_hit_fraction(spec, block_size=16)
    # Formula by hand: 8 groups, all requests use a prefix, 3000 // 16 * 16 = 2992 hit.
    p = spec.shared_prefix.probabilities()
    distinct = sum(1 - (1 - q) ** 500 for q in p)
    own = math.exp(spec.prompt_len.mu_sigma()[0] + spec.prompt_len.mu_sigma()[1] ** 2 / 2)
    by_hand = (500 - distinct) * 2992 / (500 * (3000 + own))
    assert got == pytest.approx(by_hand, rel=0.01)
    assert 0.9 < got < 1.0
    # No prefix, no hits; a bigger block size loses the partial block.
    assert expected_prefix_hit_fraction(spec, block_size=1024) < got


def test_shorthands_and_resolved_spec(tmp_path):
    path = write(
        tmp_path,
        BASE + "shared_prefix: {num_groups: 2, prefix_len: 8, popularity: uniform}\n",
    )
    workload = load_workload(str(path), seed=5)
    assert workload.spec["prompt_len"] == {"type": "fixed", "value": 100}
    assert workload.spec["shared_prefix"]["popularity"] == {"type": "uniform"}
    assert workload.spec["seed"] == 5
    assert workload.name == "spec"


def test_lognormal_forms_agree():
    a = WorkloadSpec.model_validate(
        {**_base(), "prompt_len": {"type": "lognormal", "median": 100, "sigma": 0.5}}
    )
    b = WorkloadSpec.model_validate(
        {
            **_base(),
            "prompt_len": {
                "type": "lognormal",
                "median": 100,
                "p90": 100 * math.exp(0.5 * 1.2815515655446004),
            },
        }
    )
    c = WorkloadSpec.model_validate(
        {
            **_base(),
            "prompt_len": {"type": "lognormal", "mean": 100 * math.exp(0.125), "sigma": 0.5},
        }
    )
    for spec in (b, c):
        assert spec.prompt_len.mu_sigma() == pytest.approx(a.prompt_len.mu_sigma())


def test_spec_is_frozen():
    spec = WorkloadSpec.model_validate(_base())
    with pytest.raises(ValidationError):
        spec.seed = 3  # type: ignore[misc]


def _base() -> dict:
    return {
        "arrival": {"type": "poisson", "rate": 2},
        "prompt_len": 100,
        "output_len": 20,
        "num_requests": 10,
    }


BAD_SPECS = [
    # (yaml text, field in the message, words in the message)
    (BASE + "colour: blue\n", "colour", "unknown key"),
    (BASE.replace("rate: 2", "rate: -1"), "arrival.rate", "must be > 0"),
    (BASE.replace("poisson", "weibull"), "arrival", "poisson"),
    (
        BASE.replace("prompt_len: 100", "prompt_len: {type: pareto, alpha: 2}"),
        "prompt_len",
        "lognormal",
    ),
    (BASE.replace("num_requests: 10", "num_requests: 0"), "num_requests", "must be >= 1"),
    (BASE + "duration_s: 5\n", "", "exactly one of num_requests and duration_s"),
    (
        BASE.replace("{type: poisson, rate: 2}", "{type: burst}").replace(
            "num_requests: 10", "duration_s: 5"
        ),
        "",
        "needs num_requests",
    ),
    (BASE.replace("num_requests: 10\n", ""), "", "exactly one of num_requests and duration_s"),
    (
        BASE.replace("prompt_len: 100", "prompt_len: {type: uniform, min: 9, max: 3}"),
        "prompt_len",
        "max (3) must be >= min (9)",
    ),
    (
        BASE.replace("prompt_len: 100", "prompt_len: {type: lognormal, median: 100}"),
        "prompt_len",
        "give exactly one of",
    ),
    (
        BASE.replace("prompt_len: 100", "prompt_len: {type: empirical, path: nowhere.txt}"),
        "prompt_len.path",
        "nowhere.txt",
    ),
    (
        BASE.replace("prompt_len: 100", "prompt_len: {type: normal, mean: 10, std: 1, spread: 3}"),
        "prompt_len.spread",
        "allowed: type, mean, std, max",
    ),
    (
        BASE + "shared_prefix: {num_groups: 2, prefix_len: 8, popularity: {type: pareto}}\n",
        "shared_prefix.popularity",
        "uniform",
    ),
    (
        BASE + "shared_prefix: {num_groups: 2, prefix_len: 8, fraction: 1.5}\n",
        "shared_prefix.fraction",
        "<= 1",
    ),
    (
        BASE + "max_model_len: 9\nshared_prefix: {num_groups: 1, prefix_len: 8}\n",
        "",
        "max_model_len",
    ),
    (
        BASE.replace("{type: poisson, rate: 2}", "{type: gamma, rate: 2}"),
        "arrival.burstiness",
        "missing",
    ),
    (
        BASE.replace("{type: poisson, rate: 2}", "{type: closed_loop, concurrency: 0}"),
        "arrival.concurrency",
        ">= 1",
    ),
    (
        BASE.replace(
            "{type: poisson, rate: 2}",
            "{type: piecewise, segments: [{until_s: 5, rate: 1}, {until_s: 2, rate: 3}]}",
        ),
        "arrival",
        "until_s must increase",
    ),
    (BASE + "priority: {values: [0, 1], weights: [1]}\n", "priority", "weights has 1 entries"),
    (BASE + "sessions: {turns: 3, think_time_s: -1}\n", "sessions.think_time_s", ">= 0"),
    ("arrival: [1, 2\n", "line", "YAML syntax error"),
    ("- just\n- a list\n", "", "YAML mapping"),
]


@pytest.mark.parametrize(("text", "field", "words"), BAD_SPECS)
def test_bad_specs_name_file_and_field(tmp_path, text, field, words):
    path = write(tmp_path, text, "bad.yaml")
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert field in message and words in message, message
    assert "\n" not in message
    if field:
        assert info.value.field.startswith(field) or field in info.value.field


def test_bad_spec_message_format(tmp_path):
    path = write(tmp_path, BASE.replace("rate: 2", "rate: -1"), "chat.yaml")
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    assert str(info.value) == f"{path}: arrival.rate: must be > 0 (got -1)"


def test_bad_enum_lists_allowed_values(tmp_path):
    path = write(tmp_path, BASE.replace("poisson", "weibull"))
    with pytest.raises(
        WorkloadError, match="allowed: poisson, gamma, constant, piecewise, burst, closed_loop"
    ):
        load_workload(str(path))


def test_unknown_preset_and_file_type(tmp_path):
    with pytest.raises(WorkloadError, match="no such preset or file .*chat"):
        load_workload("no-such-preset")
    odd = write(tmp_path, "x", "spec.toml")
    with pytest.raises(WorkloadError, match="unknown workload file type '.toml'"):
        load_workload(str(odd))
    with pytest.raises(WorkloadError, match="seed: must be >= 0"):
        load_workload("chat", seed=-1)


def test_empirical_file_relative_to_yaml_and_bad_contents(tmp_path):
    workload = load_workload(str(DATA / "empirical.yaml"))
    assert workload.num_requests == 50
    (tmp_path / "lens.txt").write_text("10\nten\n")
    path = write(
        tmp_path, BASE.replace("prompt_len: 100", "prompt_len: {type: empirical, path: lens.txt}")
    )
    with pytest.raises(WorkloadError, match=r"prompt_len\.path: lens\.txt line 2: 'ten'"):
        load_workload(str(path))
    (tmp_path / "lens.txt").write_text("# nothing\n")
    with pytest.raises(WorkloadError, match="holds no lengths"):
        load_workload(str(path))
