"""Progress on a terminal: every bar shows a rate in its unit and the time left, and
``kvsim plan`` reports each probe run to its bar (probe number, label, requests)."""

from __future__ import annotations

import io
import time
from pathlib import Path

from rich.console import Console

from sim.app.progress import progress_bar
from sim.plan import load_plan, run_plan


def _rendered(progress) -> str:
    out = Console(file=io.StringIO(), width=160, force_terminal=False)
    out.print(progress.make_tasks_table(progress.tasks))
    return out.file.getvalue()


def test_bar_shows_rate_elapsed_and_time_left():
    progress = progress_bar(Console(file=io.StringIO(), force_terminal=True))
    with progress:
        task = progress.add_task("simulating", total=1000, unit="req")
        before = _rendered(progress)
        for _ in range(4):
            progress.advance(task, 100)
            time.sleep(0.05)
        text = _rendered(progress)
    assert "- req/s" in before  # no estimate yet
    assert "400/1000" in text and " req/s" in text and "- req/s" not in text
    # elapsed, then "left" and an estimate of the time left (h:mm:ss)
    assert text.count("0:00:0") == 2 and "left" in text


def test_plan_reports_each_probe_run(tmp_path: Path):
    plan = load_plan(
        None,
        {
            "workload": "chat",
            "question": "max_rate",
            "num_requests": 60,
            "seeds": [0, 1],
            "slo.ttft_p90_s": 5.0,
            "engine.latency_model": "constant",
            "engine.constant_step_s": 0.002,
            "search.low": 1.0,
            "search.high": 2.0,
            "search.max_probes": 2,
            "length.fixed": True,
        },
    )
    calls: list[tuple[int, str, int | None]] = []
    finished: list[int] = []

    def on_run(probe: int, label: str, total: int | None):
        calls.append((probe, label, total))
        finished.append(0)

        def advance(n: int) -> None:
            finished[-1] += n

        return advance

    doc = run_plan(plan, tmp_path / "plan", on_run=on_run)
    runs = sum(len(s["length"]["factors"]) for p in doc["probes"] for s in p["seeds"])
    assert len(calls) == runs == 2 * doc["num_probes"]
    assert [c[0] for c in calls] == sorted(c[0] for c in calls) and calls[0][0] == 1
    assert calls[0][1].startswith("probe 1 rate=") and "seed 0" in calls[0][1]
    assert all(total == 60 for _, _, total in calls)
    assert finished == [60] * len(calls)  # every request of every run reported
