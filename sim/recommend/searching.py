"""The recommendation's search: branch and bound over the open candidates
(:mod:`sim.recommend.schedule`), each one a max_rate plan (:mod:`sim.recommend.evaluate`)
cached under ``DIR/candidates/<hash>/``, and what a searched candidate's answer makes
of its entry: rate, replicas, GPUs, cost, score, headroom.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim.recommend.evaluate import cached_result, evaluate
from sim.recommend.prepare import Prepared, plan_payload
from sim.recommend.schedule import Job, Outcome, branch_and_bound

OnEvent = Callable[[str], None]
"""Told one line per finished candidate or check (progress on stderr)."""


def candidate_dir(out: Path, entry: dict[str, Any]) -> Path:
    """The directory of a candidate's search under the recommend directory ``out``."""
    return out / "candidates" / entry["hash"]


def search_candidates(prep: Prepared, out: Path, jobs: int, on_event: OnEvent | None) -> None:
    """Branch and bound over the open candidates; fills each entry's search fields."""
    spec = prep.spec
    open_entries = [e for e in prep.entries if e["status"] == "open"]
    order = sorted(open_entries, key=lambda e: (e["optimistic_score"], e["key"]))
    by_key = {e["key"]: e for e in order}
    job_list = [_search_job(prep, out, entry, jobs) for entry in order]

    def on_done(job: Job, result: dict[str, Any] | None, status: str) -> None:
        if on_event is None:
            return
        if result is None:
            on_event(f"{job.key}: pruned (its bound cannot reach the top {spec.top})")
        else:
            rate = result.get("rate")
            shown = "no rate meets the SLOs" if rate is None else f"{rate:.4g} req/s per replica"
            on_event(f"{job.key}: {shown} ({status}, {result['num_probes']} probes)")

    outcome = _run_bb(job_list, prep, by_key, spec.top, jobs, on_done)
    for key, result in outcome.results.items():
        _fill_searched(prep, by_key[key], result, out)
    for key in outcome.pruned:
        by_key[key].update(status="pruned", reason=f"its bound cannot reach the top {spec.top}")
    for key, err in outcome.errors.items():
        by_key[key].update(status="error", reason=f"internal error: {err!r}")


def _search_job(prep: Prepared, out: Path, entry: dict[str, Any], jobs: int) -> Job:
    """One open candidate's branch-and-bound job: its plan's payload, its optimistic
    score as the bound, its cached result when an earlier run finished it."""
    directory = candidate_dir(out, entry)
    payload = {
        "dir": str(directory),
        "key": entry["key"],
        "plan": plan_payload(prep, entry),
        "tensor_parallel_size": entry["tensor_parallel_size"],
        "keep_runs": prep.spec.keep_runs,
        "helpers": jobs <= 1,
    }
    return Job(entry["key"], entry["optimistic_score"], payload, cached_result(directory))


def _run_bb(
    job_list: list[Job],
    prep: Prepared,
    by_key: dict[str, dict[str, Any]],
    top: int,
    jobs: int,
    on_done: Callable[[Job, dict[str, Any] | None, str], None],
) -> Outcome:
    # A result carries no key; branch and bound scores results of known jobs only, so
    # each job's work returns its result with its key attached for scoring.
    def score(result: dict[str, Any]) -> float:
        return _score_of(prep, by_key[result["_key"]], result)

    keyed = []
    for job in job_list:
        cached = dict(job.cached, _key=job.key) if job.cached is not None else None
        keyed.append(Job(job.key, job.lower, {**job.payload, "_key": job.key}, cached))
    outcome = branch_and_bound(keyed, score, top, _keyed_evaluate, jobs, on_done)
    for result in outcome.results.values():
        result.pop("_key", None)
    return outcome


def _keyed_evaluate(payload: dict[str, Any]) -> dict[str, Any]:
    """:func:`evaluate`, its result tagged with the candidate's key (module level, so a
    worker process can be handed it)."""
    key = payload["_key"]
    inner = {k: v for k, v in payload.items() if k != "_key"}
    return {**evaluate(inner), "_key": key}


def _score_of(prep: Prepared, entry: dict[str, Any], result: dict[str, Any]) -> float:
    """The score of a candidate's search result (:class:`sim.recommend.rank.Scoring`)."""
    return prep.scoring.score(
        result.get("rate"), entry["tensor_parallel_size"], entry["price_per_gpu_hour"]
    )


def _fill_searched(
    prep: Prepared, entry: dict[str, Any], result: dict[str, Any], out: Path
) -> None:
    """A searched candidate's figures: rate, replicas, GPUs, cost, score, headroom."""
    rate = result.get("rate")
    tp = entry["tensor_parallel_size"]
    entry["search"] = {
        k: result[k] for k in ("status", "bracket", "num_probes", "simulated", "notes")
    }
    entry["search"]["dir"] = str(candidate_dir(out, entry).relative_to(out))
    entry["points"] = result["points"]
    if rate is None:
        entry.update(status="no_rate", reason=result.get("easiest_failure"))
        return
    entry["status"] = "searched"
    if result["status"] == "at_bound":
        entry["reason"] = "every probe passed up to the analytic bound (the rate may be higher)"
    entry["rate"] = rate
    entry["at_rate"] = result.get("at_rate")
    at = next((p for p in result["points"] if p["rate"] == rate), None)
    entry["tokens_per_s_per_gpu"] = at["tokens_per_s_per_gpu"] if at else None
    entry["goodput_per_gpu"] = rate / tp
    deploy(prep, entry, prep.scoring.replicas(rate))


def deploy(prep: Prepared, entry: dict[str, Any], replicas: int | None) -> None:
    """Set an entry's deployment figures for ``replicas`` (None: no target rate)."""
    tp, price, rate = entry["tensor_parallel_size"], entry["price_per_gpu_hour"], entry["rate"]
    entry["replicas"] = replicas
    entry["gpus"] = replicas * tp if replicas is not None else tp
    entry["cost_per_hour"] = entry["gpus"] * price if price is not None else None
    entry["headroom"] = prep.scoring.headroom(rate, replicas)
    entry["score"] = prep.scoring.score(rate, tp, price, replicas)
