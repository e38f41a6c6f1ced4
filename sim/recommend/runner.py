"""Run a recommendation: prepare, branch and bound over the candidates, check the top
ones as whole clusters, rank, write the recommend directory.

The recommend directory::

    DIR/recommend.yaml              the spec as validated, its source, kvsim's version
    DIR/candidates/<hash>/          one per searched candidate: plan/ and result.json
    DIR/verify/<hash>-x<R>/         cluster checks: seed_<s>/ runs and seed_<s>.json
    DIR/recommend.json              every candidate, the ranking, the frontier (last)
    DIR/pareto.csv, DIR/plots/pareto.png, DIR/report.html

Every finished search and check is cached under its configuration hash, so a run
that was interrupted (or one with other prices, ``top`` or objective) does only what
is missing. ``recommend.json`` is written last: a directory without it is not a
finished recommendation.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kvcore import __version__
from sim.app.outdir import check_output, write_marker
from sim.recommend.evaluate import cached_result, evaluate
from sim.recommend.pareto import frontier
from sim.recommend.prepare import Prepared, plan_payload
from sim.recommend.rank import rank_key
from sim.recommend.schedule import Job, branch_and_bound, map_parallel
from sim.recommend.verify import cached_check, check_cluster, cluster_workload
from sim.sweep.table import write_atomic

OnEvent = Callable[[str], None]
"""Told one line per finished candidate or check (progress on stderr)."""


def _dir_of(out: Path, entry: dict[str, Any]) -> Path:
    return out / "candidates" / entry["hash"]


def _search(prep: Prepared, out: Path, jobs: int, on_event: OnEvent | None) -> None:
    """Branch and bound over the open candidates; fills each entry's search fields."""
    spec = prep.spec
    open_entries = [e for e in prep.entries if e["status"] == "open"]
    order = sorted(open_entries, key=lambda e: (e["optimistic_score"], e["key"]))
    by_key = {e["key"]: e for e in order}
    job_list = []
    for entry in order:
        directory = _dir_of(out, entry)
        payload = {
            "dir": str(directory),
            "key": entry["key"],
            "plan": plan_payload(prep, entry),
            "tensor_parallel_size": entry["tensor_parallel_size"],
            "keep_runs": spec.keep_runs,
            "helpers": jobs <= 1,
        }
        job_list.append(
            Job(entry["key"], entry["optimistic_score"], payload, cached_result(directory))
        )

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


def _run_bb(
    job_list: list[Job],
    prep: Prepared,
    by_key: dict[str, dict[str, Any]],
    top: int,
    jobs: int,
    on_done: Callable[[Job, dict[str, Any] | None, str], None],
) -> Any:
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
    entry["search"]["dir"] = str(_dir_of(out, entry).relative_to(out))
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
    _deploy(prep, entry, prep.scoring.replicas(rate))


def _deploy(prep: Prepared, entry: dict[str, Any], replicas: int | None) -> None:
    """Set an entry's deployment figures for ``replicas`` (None: no target rate)."""
    tp, price, rate = entry["tensor_parallel_size"], entry["price_per_gpu_hour"], entry["rate"]
    entry["replicas"] = replicas
    entry["gpus"] = replicas * tp if replicas is not None else tp
    entry["cost_per_hour"] = entry["gpus"] * price if price is not None else None
    entry["headroom"] = prep.scoring.headroom(rate, replicas)
    entry["score"] = prep.scoring.score(rate, tp, price, replicas)


def _check_payloads(
    prep: Prepared, out: Path, entry: dict[str, Any], replicas: int, jobs: int
) -> list[dict[str, Any]]:
    spec = prep.spec
    cand = prep.candidates[entry["key"]]
    assert cand.engine is not None and spec.target_rate is not None
    text = cluster_workload(
        prep.workload_spec, Path(prep.workload).stem, spec.target_rate, spec.verify.num_requests
    )
    directory = out / "verify" / f"{entry['hash']}-x{replicas}-n{spec.verify.num_requests}"
    return [
        {
            "dir": str(directory),
            "seed": seed,
            "workload_yaml": text,
            "model": prep.model,
            "gpu": cand.gpu_arg,
            "engine": cand.engine.model_dump(mode="json"),
            "replicas": replicas,
            "router": spec.router,
            "slo": spec.slo.bounds(),
            "tensor_parallel_size": entry["tensor_parallel_size"],
            "keep_runs": spec.keep_runs,
            "helpers": jobs <= 1,
        }
        for seed in spec.verify.seeds
    ]


def _run_checks(
    prep: Prepared, out: Path, wanted: list[tuple[dict[str, Any], int]], jobs: int
) -> list[dict[str, Any]]:
    """One combined check per ``(entry, replicas)``: passed when every seed passed;
    ``seeds`` holds each seed's verdict; ``dir`` the check's directory."""
    payloads, owners = [], []
    for i, (entry, replicas) in enumerate(wanted):
        for p in _check_payloads(prep, out, entry, replicas, jobs):
            payloads.append(p)
            owners.append(i)
    todo = [p for p in payloads if cached_check(Path(p["dir"]), p["seed"]) is None]
    done = dict(zip((id(p) for p in todo), map_parallel(check_cluster, todo, jobs)))
    verdicts: list[list[dict[str, Any]]] = [[] for _ in wanted]
    for owner, p in zip(owners, payloads):
        verdict = done.get(id(p)) or cached_check(Path(p["dir"]), p["seed"])
        assert verdict is not None
        verdicts[owner].append(verdict)
    out_checks = []
    for (entry, replicas), seeds in zip(wanted, verdicts):
        worst = _worst(seeds)
        out_checks.append(
            {
                "replicas": replicas,
                "passed": all(s["passed"] for s in seeds),
                "metrics": worst,
                "tokens_per_s_per_gpu": _mean(s.get("tokens_per_s_per_gpu") for s in seeds),
                "tokens_per_s_per_user": _mean(s.get("tokens_per_s_per_user") for s in seeds),
                "failures": sorted({f for s in seeds for f in s["failures"]}),
                "dir": str(
                    (
                        out
                        / "verify"
                        / f"{entry['hash']}-x{replicas}-n{prep.spec.verify.num_requests}"
                    ).relative_to(out)
                ),
            }
        )
    return out_checks


def _mean(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _worst(seeds: list[dict[str, Any]]) -> dict[str, float] | None:
    if any(s.get("metrics") is None for s in seeds):
        return None
    keys = seeds[0]["metrics"].keys()
    return {k: max(float(s["metrics"][k]) for s in seeds) for k in keys}


def _ranked(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    searched = [e for e in entries if e["status"] == "searched"]
    return sorted(searched, key=lambda e: (e.get("verified") is False, rank_key(e)))


def _verify(prep: Prepared, out: Path, jobs: int, on_event: OnEvent | None) -> None:
    """Check the top candidates as whole clusters at the target rate; one that fails
    gets another replica (up to ``verify.max_extra_replicas``), else it is marked
    ``verified: False`` and ranked after the others. Then (``verify.fewer``) the top
    one with one replica fewer, again while that passes: the top candidate's replica
    count is the smallest that met the SLOs, and ``fewer_check`` the check one below
    it that failed."""
    spec = prep.spec
    if spec.target_rate is None:
        return
    for entry in prep.entries:
        if entry["status"] == "searched":
            entry["checks"] = []
            entry["planned_replicas"] = entry["replicas"]
    while True:
        top = [e for e in _ranked(prep.entries) if e.get("verified") is not False][: spec.top]
        todo = [e for e in top if e.get("verified") is not True]
        if not todo:
            break
        checks = _run_checks(prep, out, [(e, e["replicas"]) for e in todo], jobs)
        for entry, check in zip(todo, checks):
            entry["checks"].append(check)
            if on_event:
                state = (
                    "meets the SLOs"
                    if check["passed"]
                    else "fails: " + "; ".join(check["failures"])
                )
                on_event(
                    f"{entry['key']} x{check['replicas']} at {spec.target_rate:g} req/s: {state}"
                )
            if check["passed"]:
                entry["verified"] = True
            elif entry["replicas"] < entry["planned_replicas"] + spec.verify.max_extra_replicas:
                _deploy(prep, entry, entry["replicas"] + 1)
            else:
                entry["verified"] = False
    ranked = _ranked(prep.entries)
    if not (spec.verify.fewer and ranked and ranked[0].get("verified")):
        return
    best = ranked[0]
    # The smallest cluster that holds: while one replica fewer passes too, take it.
    while best["replicas"] > 1:
        check = _run_checks(prep, out, [(best, best["replicas"] - 1)], jobs)[0]
        best["fewer_check"] = check
        if on_event:
            state = (
                "meets the SLOs" if check["passed"] else "fails: " + "; ".join(check["failures"])
            )
            on_event(f"{best['key']} x{check['replicas']} (one fewer): {state}")
        if not check["passed"]:
            break
        best["checks"].append(check)
        _deploy(prep, best, check["replicas"])
        del best["fewer_check"]


def _chosen_point(top: dict[str, Any] | None) -> dict[str, Any] | None:
    """The chosen deployment's point: its passing cluster check, else its answer."""
    if top is None:
        return None
    passing = [c for c in top.get("checks", []) if c["passed"]]
    if passing:
        c = passing[-1]
        return {
            "key": top["key"],
            "rate": None,
            "replicas": c["replicas"],
            "tokens_per_s_per_gpu": c["tokens_per_s_per_gpu"],
            "tokens_per_s_per_user": c["tokens_per_s_per_user"],
            "source": "cluster check",
        }
    at = next((p for p in top.get("points", []) if p["rate"] == top.get("rate")), None)
    return {**at, "key": top["key"], "source": "per-replica answer"} if at else None


def run_recommend(
    prep: Prepared,
    out: Path,
    jobs: int = 1,
    force: bool = False,
    on_event: OnEvent | None = None,
) -> dict[str, Any]:
    """Search, check, rank and write the recommend directory; return ``recommend.json``'s
    document. ``out`` is checked first (:func:`sim.app.outdir.check_output`)."""
    out = Path(out)
    check_output(out, "recommend", force=force)
    out.mkdir(parents=True, exist_ok=True)
    write_marker(out, "recommend")
    for name in ("recommend.json", "pareto.csv", "report.html"):
        (out / name).unlink(missing_ok=True)  # an earlier run's: not this one's answer
    spec = prep.spec
    meta = {
        "kvsim_version": __version__,
        "source": prep.source,
        "spec": spec.model_dump(mode="json"),
    }
    write_atomic(out / "recommend.yaml", yaml.safe_dump(meta, sort_keys=False))
    _search(prep, out, jobs, on_event)
    _verify(prep, out, jobs, on_event)
    ranked = _ranked(prep.entries)
    for i, entry in enumerate(ranked, start=1):
        entry["rank"] = i
    points = [
        {"key": e["key"], "gpu": e["gpu"], "tensor_parallel_size": e["tensor_parallel_size"], **p}
        for e in prep.entries
        if e["status"] == "searched"
        for p in e.get("points", [])
    ]
    front = frontier(points)
    chosen = _chosen_point(ranked[0] if ranked else None)
    doc = _document(prep, ranked, points, front, chosen)
    from sim.recommend.outputs import write_outputs

    write_outputs(out, doc)
    return doc


def _counts(prep: Prepared) -> dict[str, int]:
    statuses = [e["status"] for e in prep.entries]
    checks = sum(len(e.get("checks", [])) + (1 if "fewer_check" in e else 0) for e in prep.entries)
    return {
        "candidates": len(statuses),
        "configuration": statuses.count("configuration"),
        "infeasible": statuses.count("infeasible"),
        "pruned": statuses.count("pruned"),
        "simulated": statuses.count("searched") + statuses.count("no_rate"),
        "no_rate": statuses.count("no_rate"),
        "errors": statuses.count("error"),
        "cluster_checks": checks,
    }


def _document(
    prep: Prepared,
    ranked: list[dict[str, Any]],
    points: list[dict[str, Any]],
    front: list[dict[str, Any]],
    chosen: dict[str, Any] | None,
) -> dict[str, Any]:
    spec = prep.spec
    prices_known = prep.scoring.by_price
    return {
        "kvsim_version": __version__,
        "model": spec.model,
        "workload": spec.workload,
        "slo": spec.slo.bounds(),
        "target_rate": spec.target_rate,
        "objective": spec.goal,
        "scored_by": ("cost_per_hour" if prices_known else "gpus")
        if spec.goal == "cost"
        else "goodput_per_gpu",
        "router": spec.router,
        "top": spec.top,
        "counts": _counts(prep),
        "ranking": [e["key"] for e in ranked],
        "chosen": ranked[0]["key"] if ranked else None,
        "chosen_point": chosen,
        "pareto": front,
        "points": points,
        "candidates": [_clean(e) for e in prep.entries],
        "spec": spec.model_dump(mode="json"),
    }


def _clean(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as JSON: infinities as null."""

    def fix(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: fix(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        return v

    return fix(entry)


def load_document(out: Path) -> dict[str, Any]:
    """``recommend.json`` of a finished recommend directory."""
    return json.loads((Path(out) / "recommend.json").read_text(encoding="utf-8"))
