"""The docs stand alone in a clone and cannot drift from the code.

- every relative link in README.md and docs/*.md names a file of the repository (and
  an anchor of the page it points to), and none leaves the repository;
- the generated field tables (``scripts/docs_reference.py``) are current and every
  field of every spec has a meaning there;
- the hand-written references name every column, key, trace field and flag the code
  has.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _reference():
    spec = importlib.util.spec_from_file_location(
        "docs_reference", REPO / "scripts" / "docs_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def _tracked() -> set[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    return set(out.stdout.split()) if out.returncode == 0 else set()


def test_there_are_docs_to_check():
    names = {p.name for p in PAGES}
    assert {"README.md", "workload.md", "traces.md", "outputs.md", "plan.md"} <= names


def _id(page: Path) -> str:
    return str(page.relative_to(REPO))


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_relative_link_exists_in_a_clone(page):
    text = page.read_text(encoding="utf-8")
    tracked = _tracked()
    bad = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if REPO not in dest.parents and dest != REPO:
            bad.append(f"{target}: leaves the repository")
            continue
        if not dest.exists():
            bad.append(f"{target}: no such file")
            continue
        rel = str(dest.relative_to(REPO))
        if dest.is_file() and tracked and rel not in tracked:
            bad.append(f"{target}: not in git (a clone would not have it)")
        if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target}: no heading for #{anchor}")
    assert not bad, f"{page.name}: " + "; ".join(bad)


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_no_page_points_outside_the_repository(page):
    """No absolute path of the directory this checkout sits in, and no relative path
    to a directory beside it: a clone has neither."""
    text = page.read_text(encoding="utf-8")
    assert str(REPO.parent) + "/" not in text
    outside = [
        m.group(0)
        for m in re.finditer(r"(?:\.\./)+[\w.-]+", text)
        if REPO not in (page.parent / m.group(0)).resolve().parents
    ]
    assert not outside, outside


def test_generated_tables_are_current():
    ref = _reference()
    assert ref.stale_pages() == [], "run: python scripts/docs_reference.py"


def test_every_spec_field_has_a_meaning_and_a_table_in_the_docs():
    ref = _reference()
    docs = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    for name, model in ref.TABLES.items():
        ref.table(name)  # KeyError names a field without a meaning
        assert f"<!-- fields: {name} -->" in docs, f"no page shows table {name!r}"
        for field in model.model_fields:
            assert f"| `{field}` |" in docs, f"{model.__name__}.{field}"


def test_a_stale_table_is_noticed(tmp_path):
    ref = _reference()
    page = "<!-- fields: burst -->\n| old |\n<!-- end fields -->\n"
    assert ref.render(page) != page and "`burst`" in ref.render(page)


def _doc(name: str) -> str:
    return (REPO / "docs" / name).read_text(encoding="utf-8")


def test_outputs_page_names_every_column_and_summary_key(tmp_path):
    from sim.app.run import RunSpec, run
    from sim.records.recorders import STEP_COLUMNS
    from sim.records.request_recorder import ABORTED_COLUMNS, REQUEST_COLUMNS
    from sim.sweep.table import METRIC_COLUMNS, METRICS, header

    text = _doc("outputs.md")
    for column in (*STEP_COLUMNS, *REQUEST_COLUMNS, *ABORTED_COLUMNS):
        assert f"`{column}`" in text, column
    for column in header([]):  # sweep.csv: its own columns, then the summary's flattened
        if column not in METRIC_COLUMNS:
            assert f"`{column}`" in text, column
    for key, _ in METRICS:
        assert f"`{key}`" in text, key
    summary = run(RunSpec(workload=str(REPO / "examples" / "chat-trace.jsonl")), tmp_path / "r")
    for key in summary:
        assert f"`{key}`" in text, f"summary.json key {key!r}"
    for key in summary["window"]:
        assert f"`{key}`" in text, f"summary.json window key {key!r}"
    for key in summary["replicas"][0]:
        assert f"`{key}`" in text, f"summary.json replicas key {key!r}"


def test_traces_page_names_every_format_and_field():
    from kvcore.replay_trace import _OPTIONAL, _REQUIRED
    from workloads.traces.csv_traces import AZURE_COLUMNS, BURSTGPT_COLUMNS

    text = _doc("traces.md")
    for column in (*AZURE_COLUMNS, *BURSTGPT_COLUMNS, *_REQUIRED, *_OPTIONAL):
        assert f"`{column}`" in text, column
    for title in ("## kvsim JSONL", "## Mooncake", "## Azure", "## BurstGPT", "## Replay"):
        assert title in text


def test_engine_and_plan_pages_name_every_flag():
    from sim.cli import PLAN_PATHS
    from sim.cli.options import ENGINE_FLAGS

    engine, plan = _doc("engine.md"), _doc("plan.md")
    for decl, _ in ENGINE_FLAGS.values():
        assert f"`{decl}`" in engine, decl
    from typer.main import get_command

    from sim.cli import app

    params = {p.name: p for p in get_command(app).commands["plan"].params}
    for name in [*PLAN_PATHS, "num_seeds"]:
        flag = params[name].opts[0]
        assert f"`{flag}" in plan, flag


def test_readme_lists_every_command():
    from typer.main import get_command

    from sim.cli import app

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for name in get_command(app).commands:
        assert f"`kvsim {name}" in readme, name


SKIP = re.compile(r'(?:reason=|pytest\.skip\()f?"([^"]*)"')


def test_readme_lists_every_skip_reason():
    """Each reason a test may skip for (its literal text up to any placeholder) is in
    the README's table of skips."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("### Tests that skip") :]
    reasons = {}
    for path in sorted((REPO / "tests").rglob("*.py")):
        for text in SKIP.findall(path.read_text(encoding="utf-8")):
            reasons[text.split("{")[0].strip().rstrip(";:,")] = path.name
    assert len(reasons) >= 10, reasons
    missing = [f"{r!r} ({f})" for r, f in reasons.items() if r not in table]
    assert not missing, "README's 'Tests that skip' lacks: " + "; ".join(missing)
