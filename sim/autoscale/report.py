"""The terminal report of ``kvsim autoscale``: the schedule and the two clusters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def _yes(value: bool | None) -> str:
    return "n/a" if value is None else ("yes" if value else "NO")


def print_report(doc: dict[str, Any], out: Path) -> None:
    """Print the schedule (per window) and the comparison table."""
    console = Console()
    sched = Table(
        title=f"replicas per window ({doc['window_s']:g} s; one replica's capacity, "
        f"req/s: {doc['replica_rate_source']})"
    )
    for name in ("start (s)", "rate (req/s)", "capacity", "replicas", "meets SLOs (autoscaled)"):
        sched.add_column(name, justify="right")
    windows = doc["autoscaled"].get("windows", []) if "autoscaled" in doc else []
    for i, row in enumerate(doc["schedule"]):
        mark = " (mix differs)" if row["mix_differs"] else ""
        verdict = _yes(windows[i]["meets_slo"]) if windows else "not simulated"
        sched.add_row(
            f"{row['start_s']:,.0f}",
            f"{row['rate']:.2f}{mark}",
            f"{row['replica_rate']:.2f}",
            str(row["replicas"]),
            verdict,
        )
    console.print(sched)
    if "autoscaled" not in doc:
        console.print(
            f"dry run: peak {max(r['replicas'] for r in doc['schedule'])} replicas, "
            f"scale-up delay {doc['scale_up_delay_s']:.0f} s; nothing simulated or written"
        )
        return
    cmp = Table(title="autoscaled cluster against a fixed one sized for the peak")
    cmp.add_column("")
    cmp.add_column("autoscaled", justify="right")
    cmp.add_column("peak-sized", justify="right")
    a, p = doc["autoscaled"], doc["peak"]
    cmp.add_row("GPU-hours", f"{a['gpu_hours']:.2f}", f"{p['gpu_hours']:.2f}")
    cmp.add_row("peak GPUs", str(a["peak_gpus"]), str(p["peak_gpus"]))
    cmp.add_row("mean GPUs", f"{a['mean_gpus']:.2f}", f"{p['mean_gpus']:.2f}")
    for key, label in (
        ("ttft_p90_s", "TTFT p90 (s)"),
        ("tpot_p99_s", "TPOT p99 (s)"),
        ("e2e_p99_s", "E2E p99 (s)"),
    ):
        cmp.add_row(label, f"{a['slo_figures'][key]:.3f}", f"{p['slo_figures'][key]:.3f}")
    cmp.add_row("meets SLOs (whole run)", _yes(a["meets_slo"]), _yes(p["meets_slo"]))
    judged = a.get("windows_judged") or 0
    if judged:
        cmp.add_row("windows meeting SLOs", f"{a['windows_meeting_slo']} of {judged}", "")
    console.print(cmp)
    console.print(
        f"scale-up delay {doc['scale_up_delay_s']:.0f} s, lead {doc['lead_s']:.0f} s; "
        f"wrote {out / 'autoscale.json'}"
    )
