"""Sweep reports and ``kvsim report``: rendered from a directory's records alone."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import yaml
from sim_run_helpers import kvsim_cli, run_sim, write_yaml

from reports.sweep_data import SweepFrame, load_sweep_frame
from reports.sweep_html import headline, render_sweep_report
from sim.sweep.table import METRIC_COLUMNS, header

EVIL = "<script>alert('x')</script>"


def fake_sweep(out: Path) -> Path:
    """A sweep directory made by hand: blocks x rate x 2 seeds, one failed cell,
    saturated points at the highest rate, a hostile name."""
    blocks, rates = [100, 400, 1600], [2.0, 8.0, 32.0]
    spec = {
        "name": EVIL,
        "axes": [
            {"path": "engine.num_gpu_blocks_override", "values": blocks},
            {"path": "workload.arrival.rate", "values": rates},
        ],
        "seeds": [0, 1],
    }
    out.mkdir(parents=True)
    write_yaml(out / "sweep.yaml", {"kvsim_version": "test", "spec": spec})
    axes = [a["path"] for a in spec["axes"]]
    rows = []
    for b in blocks:
        for r in rates:
            for seed in (0, 1):
                index = len(rows)
                lead = [str(index), f"{index:04d}-x", str(b), repr(r), str(seed)]
                if b == 100 and r == 32.0:
                    blank = [""] * len(METRIC_COLUMNS)
                    rows.append([*lead, "stuck", *blank, "", f"stuck {EVIL}"])
                    continue
                metrics = {c: 0.5 for c in METRIC_COLUMNS}
                metrics["throughput_rps"] = min(r, 20.0)
                metrics["preemptions_per_request"] = 100.0 / b * r / 8 + 0.01 * seed
                metrics["router"] = ""
                verdict = "saturated" if r == 32.0 else "steady"
                cells = [str(metrics[c]) for c in METRIC_COLUMNS]
                rows.append([*lead, "ok", *cells, verdict, ""])
    with (out / "sweep.csv").open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header(axes))
        writer.writerows(rows)
    return out


def test_sweep_frame_reads_axes_and_verdicts(tmp_path: Path) -> None:
    frame = load_sweep_frame(fake_sweep(tmp_path / "s"))
    assert frame.x == "engine.num_gpu_blocks_override"
    assert frame.series == ["workload.arrival.rate"]
    assert len(frame.ok) == 16 and int(frame.saturated().sum()) == 4


def test_sweep_report_has_every_plot_and_escapes_inputs(tmp_path: Path) -> None:
    out = fake_sweep(tmp_path / "s")
    page = render_sweep_report(out).read_text()
    plots = {p.name for p in (out / "plots").glob("*.png")}
    assert plots == {
        "throughput.png",
        "latency.png",
        "preemptions.png",
        "prefix_cache.png",
        "kv_usage.png",
        "heatmap_preemptions.png",
    }
    assert page.count("data:image/png;base64,") == len(plots)
    assert EVIL not in page and "&lt;script&gt;" in page
    assert "stuck" in page


def test_categorical_single_axis_sweep(tmp_path: Path) -> None:
    out = fake_sweep(tmp_path / "s")
    meta = yaml.safe_load((out / "sweep.yaml").read_text())
    meta["spec"]["axes"] = [{"path": "router", "values": ["round_robin", "prefix_aware"]}]
    write_yaml(out / "sweep.yaml", meta)
    with (out / "sweep.csv").open() as f:
        rows = list(csv.reader(f))
    cols = header(["router"])
    new = [cols] + [
        [r[0], r[1], ["round_robin", "prefix_aware"][i % 2], *r[4:]] for i, r in enumerate(rows[1:])
    ]
    with (out / "sweep.csv").open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(new)
    render_sweep_report(out)
    assert (out / "plots" / "prefix_cache.png").is_file()
    assert not (out / "plots" / "heatmap_preemptions.png").exists()


def test_kvsim_report_rerenders_run_and_sweep_dirs(tmp_path: Path) -> None:
    workload = write_yaml(
        tmp_path / "w.yaml",
        {
            "arrival": {"type": "poisson", "rate": 4.0},
            "prompt_len": {"type": "fixed", "value": 100},
            "output_len": {"type": "fixed", "value": 20},
            "num_requests": 15,
        },
    )
    run_dir = tmp_path / "run"
    run_sim(workload, run_dir, latency_model="constant")
    before = json.loads((run_dir / "summary.json").read_text())
    shutil.rmtree(run_dir / "plots")
    (run_dir / "report.html").unlink()
    sweep_dir = fake_sweep(tmp_path / "sweep")
    for target in (run_dir, sweep_dir):
        proc = kvsim_cli("report", str(target))
        assert proc.returncode == 0, proc.stderr
        assert (target / "report.html").is_file()
    assert {p.name for p in (run_dir / "plots").glob("*.png")} == {"timeline.png", "latency.png"}
    assert json.loads((run_dir / "summary.json").read_text()) == before
    assert "kvsim run: w on" in (run_dir / "report.html").read_text()


def _frame_from_rows(tmp_path: Path, rows: list[tuple]) -> SweepFrame:
    lines = ["point,point_id,workload.arrival.rate,router,seed,status,verdict"]
    lines += [",".join(map(str, (i, f"p{i}", *r))) for i, r in enumerate(rows)]
    (tmp_path / "sweep.csv").write_text("\n".join(lines) + "\n")
    return load_sweep_frame(tmp_path)


def test_headline_says_where_saturation_starts(tmp_path: Path) -> None:
    frame = _frame_from_rows(
        tmp_path,
        [
            (8, "rr", 0, "ok", "steady"),
            (8, "rr", 1, "ok", "steady"),
            (16, "rr", 0, "ok", "steady"),
            (16, "rr", 1, "ok", "undecided"),  # one seed not shown steady: 16 is not
            (32, "rr", 0, "ok", "saturated"),
            (8, "pa", 0, "ok", "steady"),
            (16, "pa", 0, "ok", "steady"),
            (32, "pa", 0, "ok", "steady"),
        ],
    )
    assert headline(frame) == (
        "router=pa: steady at every arrival rate tried (8 req/s to 32 req/s); "
        "router=rr: steady up to 8 req/s; not shown steady from 16 req/s"
    )


def _metrics_frame(tmp_path: Path, slo: dict | None) -> SweepFrame:
    """KV blocks x 2 seeds: more blocks, more throughput; 400 blocks saturates on seed 1."""
    cols = "point,point_id,engine.num_gpu_blocks_override,seed,status,verdict"
    cols += ",window_throughput_rps,window_ttft_s_p90,window_tpot_s_p90"
    rows = [
        (100, 0, "steady", 2.0, 0.1, 0.01),
        (100, 1, "steady", 2.2, 0.12, 0.01),
        (400, 0, "steady", 6.0, 0.3, 0.02),
        (400, 1, "saturated", 5.0, 9.0, 0.5),
        (1600, 0, "steady", 5.5, 0.8, 0.02),
        (1600, 1, "steady", 5.7, 0.9, 0.02),
    ]
    lines = [cols] + [
        ",".join(map(str, (i, f"id{i}", b, seed, "ok", v, *m)))
        for i, (b, seed, v, *m) in enumerate(rows)
    ]
    (tmp_path / "sweep.csv").write_text("\n".join(lines) + "\n")
    spec = {"axes": [{"path": "engine.num_gpu_blocks_override", "values": [100, 400, 1600]}]}
    if slo:
        spec["slo"] = slo
    write_yaml(tmp_path / "sweep.yaml", {"spec": spec})
    return load_sweep_frame(tmp_path)


def test_headline_names_the_best_point(tmp_path: Path) -> None:
    """The best cell is the highest finished rate among cells steady on every seed (or
    meeting the SLOs on every seed); a readable name, units, and the range in words."""
    from reports.sweep_table import point_rows

    frame = _metrics_frame(tmp_path, None)
    assert headline(frame) == (
        "steady at 100, 1600 blocks; not at the others; "
        "highest steady throughput: blocks=1600 (5.60 req/s finished; worst seed: "
        "TTFT p90 900.0 ms, TPOT p90 20.0 ms)"
    )
    frame = _metrics_frame(tmp_path, {"ttft_p90_s": 0.5})
    assert headline(frame).endswith(
        "best point meeting the SLOs (TTFT p90 <= 500 ms): blocks=100 (2.10 req/s finished; "
        "worst seed: TTFT p90 120.0 ms, TPOT p90 10.0 ms)"
    )
    rows = point_rows(frame)
    assert [r.name for r in rows[:2]] == ["blocks=100, seed 0", "blocks=100, seed 1"]
    assert [r.slo for r in rows[3:5]] == [
        "misses: saturated",
        "misses: TTFT p90 800.0 ms > 500.0 ms",
    ]
    assert rows[3].cells[2] == "-"  # a saturated point's latency is left out
    assert rows[4].cells[2] == "800.0"
