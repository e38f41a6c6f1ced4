"""Reports of damaged or unusual records: no silent partial plots, no stray warnings.

- ``kvsim report RUN`` on a run whose ``steps.csv`` / ``requests.csv`` was cut short
  or edited: one ``kvsim: warning:`` line per problem on stderr naming the file, the
  same line in ``report.html``, exit 0; a file that cannot be read at all: exit 2 and
  one ``kvsim: error:`` line naming it. An intact run (or one whose file only lost
  its final newline): no warning.
- ``kvsim plan`` with an SLO nothing meets stops at its first probe: the error line,
  and no matplotlib warning on stderr.
- A run with rejected requests says so in its report.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sim_run_helpers import kvsim_cli, run_sim, write_jsonl, write_yaml


def _cut_mid_line(run: Path) -> None:
    data = (run / "steps.csv").read_bytes()
    end_of_line = data.index(b"\n", len(data) // 2)
    (run / "steps.csv").write_bytes(data[: end_of_line - 3])  # 3 characters short of a row


def _drop_last_rows(run: Path) -> None:
    lines = (run / "steps.csv").read_text().splitlines(keepends=True)
    (run / "steps.csv").write_text("".join(lines[:-5]))


def _garble_value(run: Path) -> None:
    lines = (run / "steps.csv").read_text().splitlines(keepends=True)
    fields = lines[3].split(",")
    fields[2] = "12..5"  # start_s
    lines[3] = ",".join(fields)
    (run / "steps.csv").write_text("".join(lines))


def _drop_requests(run: Path) -> None:
    lines = (run / "requests.csv").read_text().splitlines(keepends=True)
    (run / "requests.csv").write_text("".join(lines[:-2]))


def _empty_steps(run: Path) -> None:
    (run / "steps.csv").write_text("")


def _no_start_column(run: Path) -> None:
    lines = (run / "steps.csv").read_text().splitlines(keepends=True)
    lines[0] = lines[0].replace("start_s", "begin_s")
    (run / "steps.csv").write_text("".join(lines))


def _missing_steps(run: Path) -> None:
    (run / "steps.csv").unlink()


def _no_final_newline(run: Path) -> None:
    data = (run / "steps.csv").read_bytes()
    (run / "steps.csv").write_bytes(data.rstrip(b"\n"))


def _intact(run: Path) -> None:
    return None


# (id, damage, exit status, substrings of the warning (exit 0) or error (exit 2) lines,
#  substrings of report.html; None: no warning at all)
CASES: list[tuple[str, Callable[[Path], None], int, list[str] | None, list[str]]] = [
    (
        "cut-mid-line",
        _cut_mid_line,
        0,
        ["steps.csv: the last line is cut off", "steps.csv holds", "the plots are partial"],
        ["steps.csv holds", "the plots are partial"],
    ),
    (
        "rows-missing",
        _drop_last_rows,
        0,
        ["steps.csv holds {n5} of {n} steps: the plots are partial"],
        ["steps.csv holds {n5} of {n} steps: the plots are partial"],
    ),
    (
        "unparsable-value",
        _garble_value,
        0,
        ["steps.csv: 1 row(s) with values that are not numbers", "line 4", "start_s '12..5'"],
        ["steps.csv holds {n1} of {n} steps: the plots are partial"],
    ),
    (
        "requests-missing",
        _drop_requests,
        0,
        ["requests.csv holds {f2} of {f} finished requests"],
        ["requests.csv holds {f2} of {f} finished requests"],
    ),
    ("steps-empty", _empty_steps, 2, ["steps.csv", "empty"], []),
    ("steps-no-start-column", _no_start_column, 2, ["steps.csv", "start_s"], []),
    ("steps-missing", _missing_steps, 2, ["steps.csv", "missing"], []),
    ("only-final-newline-gone", _no_final_newline, 0, None, []),
    ("intact", _intact, 0, None, []),
]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """One small run, copied and damaged once per case, then ``kvsim report`` on each."""
    base = tmp_path_factory.mktemp("report-inputs")
    workload = write_yaml(
        base / "wl.yaml",
        {
            "arrival": {"type": "poisson", "rate": 4},
            "prompt_len": 64,
            "output_len": 16,
            "num_requests": 12,
        },
    )
    summary = run_sim(workload, base / "run", seed=0)
    n, f = summary["num_steps"], summary["num_finished"]
    counts = {"n": n, "f": f, "n1": n - 1, "n5": n - 5, "f2": f - 2}  # what the cases leave
    fmt = {k: f"{v:,}" for k, v in counts.items()}

    def one(case):
        case_id, damage, *_ = case
        run = base / case_id
        shutil.copytree(base / "run", run)
        (run / "report.html").unlink()
        damage(run)
        return case_id, (run, kvsim_cli("report", str(run), timeout=60))

    with ThreadPoolExecutor(max_workers=2) as pool:
        return fmt, dict(pool.map(one, CASES))


@pytest.mark.parametrize(
    ("case_id", "damage", "status", "needles", "page_needles"), CASES, ids=[c[0] for c in CASES]
)
def test_report_on_damaged_records(reports, case_id, damage, status, needles, page_needles):
    """Warn (exit 0) or refuse (exit 2) naming the file; the report shows the warning."""
    fmt, results = reports
    run, proc = results[case_id]
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    if needles is None:
        assert lines == [], proc.stderr
        page = (run / "report.html").read_text()
        # No warning line (summary.json, shown folded at the end, names steps.csv).
        assert "steps.csv:" not in page and "steps.csv holds" not in page
        assert "requests.csv holds" not in page
        return
    if status == 2:
        assert len(lines) == 1 and lines[0].startswith("kvsim: error: "), proc.stderr
        assert not (run / "report.html").exists()
    else:
        assert lines and all(x.startswith(f"kvsim: warning: {run}/") for x in lines), lines
    text = "\n".join(lines)
    for needle in needles:
        assert needle.format(**fmt) in text, f"{needle!r} not in {text!r}"
    if status == 0:
        page = (run / "report.html").read_text()
        for needle in page_needles:
            assert needle.format(**fmt) in page, f"{needle!r} not in report.html"


def test_plan_impossible_slo_prints_no_matplotlib_warning(tmp_path):
    """The plan stops after its first probe (one x value): exit 2, the SLO message, a
    report drawn around that single value, and nothing else on stderr."""
    proc = kvsim_cli(
        "plan",
        "--question",
        "max_rate",
        "--workload",
        "chat",
        "--ttft-p90-s",
        "0.0001",
        "--num-requests",
        "60",
        "--out",
        "p",
        cwd=tmp_path,
        timeout=120,
    )
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr
    assert len(lines) == 1 and "no rate searched meets the SLOs" in lines[0], proc.stderr
    assert (tmp_path / "p" / "plots" / "plan_probe_curve.png").is_file()


def test_run_report_shows_rejected_requests(tmp_path):
    """A request whose prompt is at least max_model_len is rejected; report.html says
    how many, next to the summary."""
    rows = [
        {"request_id": f"r{i}", "arrival_s": 0.1 * i, "prompt_tokens": 32, "output_tokens": 4}
        for i in range(4)
    ]
    rows.append({"request_id": "long", "arrival_s": 0.5, "prompt_tokens": 3000, "output_tokens": 4})
    trace = write_jsonl(tmp_path / "trace.jsonl", rows)
    summary = run_sim(trace, tmp_path / "run", max_model_len=2048)
    assert summary["num_finished"] == 4
    page = (tmp_path / "run" / "report.html").read_text()
    assert "1 of 5 requests rejected" in page, page[:2000]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["num_finished"] == 4


def test_run_report_shows_capped_outputs(reports, tmp_path):
    """``num_capped_outputs`` in summary.json (non-zero) is a line of report.html."""
    from reports.html import render_report

    _, results = reports
    run = tmp_path / "run"
    shutil.copytree(results["intact"][0], run)
    summary = json.loads((run / "summary.json").read_text())
    summary["num_capped_outputs"] = 3
    (run / "summary.json").write_text(json.dumps(summary))
    page = render_report(run).read_text()
    assert "3 requests&#x27; outputs capped at max_model_len" in page, page[:2000]
