"""The recommendation for people: the ranked top-N rows (terminal and report share
them), the counts line, and the terminal text with the ASCII Pareto chart and the
``vllm serve`` lines."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from sim.recommend import ascii_chart

COLUMNS = (
    "#",
    "replicas x GPU, TP (GPUs)",
    "USD/h",
    "engine flags",
    "req/s per replica",
    "req/s per GPU",
    "tok/s per GPU",
    "at the target, s",
    "headroom",
    "check",
)


SECOND = ("engine flags", "at the target, s")
"""The columns the terminal shows in its second table."""


def _engine_text(entry: dict[str, Any]) -> str:
    e = entry.get("engine") or {}
    prefix = "on" if e.get("enable_prefix_caching") else "off"
    return (
        f"seqs {e.get('max_num_seqs')} mbt {e.get('max_num_batched_tokens')} "
        f"util {e.get('gpu_memory_utilization')} kv {e.get('kv_cache_dtype')} prefix {prefix}"
    )


def _passing_check(entry: dict[str, Any]) -> dict[str, Any] | None:
    passing = [c for c in entry.get("checks", []) if c["passed"]]
    return passing[-1] if passing else None


def _at_target(entry: dict[str, Any], slo: dict[str, float]) -> str:
    check = _passing_check(entry) or (entry.get("checks") or [None])[-1]
    metrics = check.get("metrics") if check else entry.get("at_rate")
    if not metrics:
        return "-"
    return " ".join(f"{k.removesuffix('_s')} {metrics[k]:.3g}" for k in slo if k in metrics)


def _check_text(entry: dict[str, Any]) -> str:
    if entry.get("verified") is True:
        return "meets"
    if entry.get("verified") is False:
        return "fails"
    return "-"


def top_rows(doc: dict[str, Any]) -> list[list[str]]:
    """The ranked top-``doc["top"]`` rows, one string per :data:`COLUMNS` cell."""
    by_key = {c["key"]: c for c in doc["candidates"]}
    rows = []
    for rank, key in enumerate(doc["ranking"][: doc["top"]], start=1):
        e = by_key[key]
        cost = e.get("cost_per_hour")
        headroom = e.get("headroom")
        replicas = "" if e.get("replicas") is None else f"{e['replicas']} x "
        deployment = f"{replicas}{e['gpu']} tp{e['tensor_parallel_size']} ({e['gpus']})"
        rows.append(
            [
                str(rank),
                deployment,
                "-" if cost is None else f"{cost:,.2f}",
                _engine_text(e),
                f"{e['rate']:.3g}",
                f"{e['goodput_per_gpu']:.3g}",
                "-"
                if e.get("tokens_per_s_per_gpu") is None
                else f"{e['tokens_per_s_per_gpu']:,.0f}",
                _at_target(e, doc["slo"]),
                "-" if headroom is None else f"{headroom:+.0%}",
                _check_text(e),
            ]
        )
    return rows


def counts_line(doc: dict[str, Any]) -> str:
    """How many candidates were simulated, and why the others were not."""
    c = doc["counts"]
    text = (
        f"{c['candidates']} candidates: {c['simulated']} simulated, "
        f"{c['pruned'] + c['infeasible'] + c['configuration']} pruned "
        f"({c['configuration']} do not start, {c['infeasible']} miss an SLO at zero load, "
        f"{c['pruned']} bounded out of the top {doc['top']})"
    )
    if c["no_rate"]:
        text += f"; {c['no_rate']} simulated with no rate meeting the SLOs"
    if c["errors"]:
        text += f"; {c['errors']} internal errors"
    return text + f"; {c['cluster_checks']} cluster checks"


def fewer_line(doc: dict[str, Any]) -> str | None:
    """What the top candidate with one replica fewer did, or None."""
    if doc["chosen"] is None:
        return None
    top = next(c for c in doc["candidates"] if c["key"] == doc["chosen"])
    check = top.get("fewer_check")
    if check is None:
        return None
    state = "meets the SLOs too" if check["passed"] else "fails: " + "; ".join(check["failures"])
    return f"with one replica fewer ({check['replicas']}): {state}"


def print_recommendation(doc: dict[str, Any], console: Console | None = None) -> None:
    """The terminal output: heading, table, counts, chart, ``vllm serve`` lines."""
    console = console or Console()
    slo = ", ".join(f"{k} <= {v:g}" for k, v in doc["slo"].items())
    target = f"{doc['target_rate']:g} req/s" if doc["target_rate"] else "max goodput per GPU"
    console.print(f"kvsim recommend: {doc['model']} on {doc['workload']}, {target}; SLOs {slo}")
    rows = top_rows(doc)
    if rows:
        # Two tables, so each fits 80 columns: the deployments, then their engines.
        first = [i for i, c in enumerate(COLUMNS) if c not in SECOND]
        second = [0, *(COLUMNS.index(c) for c in SECOND)]
        for title, cols in ((f"top {doc['top']} by {doc['scored_by']}", first), ("", second)):
            table = Table(*(COLUMNS[i] for i in cols), title=title or None)
            for row in rows:
                table.add_row(*(row[i] for i in cols))
            console.print(table)
    else:
        console.print("no candidate meets the SLOs")
    console.print(counts_line(doc), soft_wrap=True)
    fewer = fewer_line(doc)
    if fewer:
        console.print(fewer, soft_wrap=True)
    console.print(
        ascii_chart.render(doc["points"], doc["pareto"], doc.get("chosen_point")),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    by_key = {c["key"]: c for c in doc["candidates"]}
    for rank, key in enumerate(doc["ranking"][: doc["top"]], start=1):
        e = by_key[key]
        times = f" (x{e['replicas']} replicas)" if e.get("replicas") else ""
        console.print(
            f"#{rank}{times}: {e['vllm_serve']}", markup=False, highlight=False, soft_wrap=True
        )
