"""Body of ``kvsim recommend``: read the spec (file, then options), prepare, run, print.

Exit status: 0 with a recommendation; 2 on bad input and when no candidate meets the
SLOs (``recommend.json`` is still written, with every candidate and why); 1 on an
internal error.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sim.app.outdir import OutputError
from sim.recommend.command import LISTS, RECOMMEND_PATHS
from sim.recommend.describe import print_recommendation
from sim.recommend.prepare import Prepared, prepare
from sim.recommend.runner import run_recommend
from sim.recommend.spec import RecommendError, load_recommend
from sim.signals import exit_status, interrupted
from sim.sweep.executors import default_jobs

_TRUE = {"true", "on", "yes", "1"}
_FALSE = {"false", "off", "no", "0"}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def parse_list(name: str, text: str) -> list[Any]:
    """A comma-separated option's values (:data:`LISTS` types); RecommendError naming
    the option on a bad one."""
    kind = LISTS[name]
    out: list[Any] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise RecommendError(f"{_flag(name)}: empty value in {text!r}")
        try:
            if kind is bool:
                low = part.lower()
                if low not in _TRUE | _FALSE:
                    raise ValueError
                out.append(low in _TRUE)
            else:
                out.append(kind(part))
        except ValueError:
            what = {int: "an integer", float: "a number", bool: "true or false"}.get(kind, "")
            raise RecommendError(f"{_flag(name)}: {part!r} is not {what}") from None
    return out


def overrides_from(values: dict[str, Any]) -> dict[str, Any]:
    """Spec overrides (dotted paths) from the options given (others are None)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if value is None:
            continue
        if name == "num_seeds":
            if value < 1:
                raise RecommendError("--seeds: must be >= 1")
            out["search.seeds"] = list(range(value))
            continue
        if name in LISTS:
            value = parse_list(name, value)
        if name == "prices":
            value = str(Path(value).expanduser().resolve())
        out[RECOMMEND_PATHS[name]] = value
    return out


def _dry_run(prep: Prepared) -> None:
    table = Table("candidate", "status", "rate bound", "bound by", "optimistic score", "why")
    for e in prep.entries:
        bounds = e.get("bounds") or {}
        rate = bounds.get("rate_bound")
        score = e.get("optimistic_score")
        table.add_row(
            e["key"],
            e["status"],
            "-" if rate is None else f"{rate:.3g} req/s",
            bounds.get("binding") or "-",
            "-" if score is None else f"{score:.4g}",
            e.get("reason") or "",
        )
    Console().print(table)
    statuses = [e["status"] for e in prep.entries]
    print(
        f"{len(statuses)} candidates: {statuses.count('configuration')} do not start, "
        f"{statuses.count('infeasible')} miss an SLO at zero load, "
        f"{statuses.count('open')} to search (branch and bound may prune more as "
        "results come in); nothing simulated (--dry-run)"
    )


def recommend_command(
    path: str | None,
    out: str | None,
    values: dict[str, Any],
    jobs: int | None,
    dry_run: bool = False,
    force: bool = False,
) -> int:
    """Run ``kvsim recommend``; returns the exit status."""
    out_dir = Path(out) if out else None
    t0 = time.perf_counter()
    try:
        if jobs is not None and jobs < 1:
            raise RecommendError(f"--jobs: must be >= 1 (got {jobs})")
        spec = load_recommend(path, overrides_from(values))
        source = path or "recommend flags"
        base_dir = Path(path).resolve().parent if path else None
        prep = prepare(spec, source, base_dir)
        if dry_run:
            _dry_run(prep)
            return 0
        if out_dir is None:
            out_dir = (
                Path("recommendations") / f"{Path(spec.model).stem}_{Path(spec.workload).stem}"
            )
        err = Console(stderr=True)
        doc = run_recommend(
            prep,
            out_dir,
            jobs=jobs or default_jobs(),
            force=force,
            on_event=lambda line: err.print(line, markup=False, highlight=False, soft_wrap=True),
        )
    except (RecommendError, OutputError) as e:
        print(f"kvsim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        where = f"; finished searches are kept in {out_dir}, run again to resume" if out_dir else ""
        print(f"kvsim: {interrupted(e)}; no recommend.json written{where}", file=sys.stderr)
        return exit_status(e)
    print_recommendation(doc)
    wall = time.perf_counter() - t0
    c = doc["counts"]
    print(
        f"wall time {wall:.1f} s; candidates {c['candidates']}: simulated {c['simulated']}, "
        f"pruned {c['pruned'] + c['infeasible'] + c['configuration']}"
    )
    print(f"recommendation: {out_dir / 'recommend.json'}, report: {out_dir / 'report.html'}")
    if not doc["ranking"]:
        print(
            f"kvsim: error: no candidate meets the SLOs; every candidate and why in "
            f"{out_dir / 'recommend.json'}",
            file=sys.stderr,
        )
        return 2
    return 0
