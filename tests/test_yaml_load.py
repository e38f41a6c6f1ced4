"""calibrate.yaml_load: the same objects as yaml.safe_load, and PyYAML's own errors."""

from pathlib import Path

import pytest
import yaml

from calibrate import yaml_load

CATALOG = Path(__file__).resolve().parents[1] / "calibrate" / "catalog"


@pytest.mark.parametrize("path", sorted(CATALOG.rglob("*.yaml")), ids=lambda p: p.name)
def test_bundled_files_parse_as_safe_load_parses_them(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert yaml_load.safe_load(text) == yaml.safe_load(text)


def test_values_and_types_match_safe_load() -> None:
    text = "a: 1\nb: 1.5e3\nc: [x, null, true, 2024-01-02]\nd: {e: '7', f: .inf}\n"
    ours, theirs = yaml_load.safe_load(text), yaml.safe_load(text)
    assert ours == theirs
    assert [type(v) for v in ours["c"]] == [type(v) for v in theirs["c"]]


def test_a_rejected_document_raises_safe_loads_error() -> None:
    text = "a: [1, 2\nb: 3\n"
    with pytest.raises(yaml.YAMLError) as theirs:
        yaml.safe_load(text)
    with pytest.raises(yaml.YAMLError) as ours:
        yaml_load.safe_load(text)
    assert str(ours.value) == str(theirs.value)


def test_unsafe_tags_stay_refused() -> None:
    with pytest.raises(yaml.YAMLError):
        yaml_load.safe_load("!!python/object/apply:os.system ['true']\n")
