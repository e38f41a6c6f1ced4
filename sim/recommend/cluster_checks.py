"""The recommendation's cluster checks: the top candidates simulated as whole clusters
at the target rate (:mod:`sim.recommend.verify`), one more replica for one that fails,
one fewer for the best while that still passes; and the ranking they leave.

Each check is cached under ``DIR/verify/<hash>-x<R>-n<N>/`` (``seed_<s>/`` runs and
``seed_<s>.json``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.recommend.prepare import Prepared
from sim.recommend.rank import rank_key
from sim.recommend.schedule import map_parallel
from sim.recommend.searching import OnEvent, deploy
from sim.recommend.verify import cached_check, check_cluster, cluster_workload


def ranked(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The searched entries, best first; those that failed their checks after the rest."""
    searched = [e for e in entries if e["status"] == "searched"]
    return sorted(searched, key=lambda e: (e.get("verified") is False, rank_key(e)))


def verify_top(prep: Prepared, out: Path, jobs: int, on_event: OnEvent | None) -> None:
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
    _check_until_top_holds(prep, out, jobs, on_event)
    best = ranked(prep.entries)
    if not (spec.verify.fewer and best and best[0].get("verified")):
        return
    _try_fewer_replicas(prep, out, best[0], jobs, on_event)


def _check_until_top_holds(prep: Prepared, out: Path, jobs: int, on_event: OnEvent | None) -> None:
    """Check the unchecked of the top candidates, adding a replica to one that fails
    (or marking it ``verified: False``), until the top ones all passed."""
    spec = prep.spec
    assert spec.target_rate is not None
    while True:
        top = [e for e in ranked(prep.entries) if e.get("verified") is not False][: spec.top]
        todo = [e for e in top if e.get("verified") is not True]
        if not todo:
            break
        checks = _run_checks(prep, out, [(e, e["replicas"]) for e in todo], jobs)
        for entry, check in zip(todo, checks):
            entry["checks"].append(check)
            if on_event:
                on_event(
                    f"{entry['key']} x{check['replicas']} at {spec.target_rate:g} req/s: "
                    f"{_outcome_text(check)}"
                )
            if check["passed"]:
                entry["verified"] = True
            elif entry["replicas"] < entry["planned_replicas"] + spec.verify.max_extra_replicas:
                deploy(prep, entry, entry["replicas"] + 1)
            else:
                entry["verified"] = False


def _try_fewer_replicas(
    prep: Prepared, out: Path, best: dict[str, Any], jobs: int, on_event: OnEvent | None
) -> None:
    """The smallest cluster that holds: while one replica fewer passes too, take it;
    the first one that fails stays as ``fewer_check``."""
    while best["replicas"] > 1:
        check = _run_checks(prep, out, [(best, best["replicas"] - 1)], jobs)[0]
        best["fewer_check"] = check
        if on_event:
            on_event(f"{best['key']} x{check['replicas']} (one fewer): {_outcome_text(check)}")
        if not check["passed"]:
            break
        best["checks"].append(check)
        deploy(prep, best, check["replicas"])
        del best["fewer_check"]


def _outcome_text(check: dict[str, Any]) -> str:
    """A check's outcome for the progress line."""
    return "meets the SLOs" if check["passed"] else "fails: " + "; ".join(check["failures"])


def _check_dir(prep: Prepared, out: Path, entry: dict[str, Any], replicas: int) -> Path:
    """The directory of a cluster check of ``entry`` with ``replicas`` replicas."""
    return out / "verify" / f"{entry['hash']}-x{replicas}-n{prep.spec.verify.num_requests}"


def _check_payloads(
    prep: Prepared, out: Path, entry: dict[str, Any], replicas: int, jobs: int
) -> list[dict[str, Any]]:
    """One :func:`sim.recommend.verify.check_cluster` payload per verify seed."""
    spec = prep.spec
    cand = prep.candidates[entry["key"]]
    assert cand.engine is not None and spec.target_rate is not None
    text = cluster_workload(
        prep.workload_spec, Path(prep.workload).stem, spec.target_rate, spec.verify.num_requests
    )
    directory = _check_dir(prep, out, entry, replicas)
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
    return [
        {
            "replicas": replicas,
            "passed": all(s["passed"] for s in seeds),
            "metrics": _worst(seeds),
            "tokens_per_s_per_gpu": _mean(s.get("tokens_per_s_per_gpu") for s in seeds),
            "tokens_per_s_per_user": _mean(s.get("tokens_per_s_per_user") for s in seeds),
            "failures": sorted({f for s in seeds for f in s["failures"]}),
            "dir": str(_check_dir(prep, out, entry, replicas).relative_to(out)),
        }
        for (entry, replicas), seeds in zip(wanted, verdicts)
    ]


def _mean(values: Any) -> float | None:
    """The mean of the known (not None) values; None when none is known."""
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _worst(seeds: list[dict[str, Any]]) -> dict[str, float] | None:
    """Each SLO metric's worst (highest) value over the seeds; None when a seed has none."""
    if any(s.get("metrics") is None for s in seeds):
        return None
    keys = seeds[0]["metrics"].keys()
    return {k: max(float(s["metrics"][k]) for s in seeds) for k in keys}
