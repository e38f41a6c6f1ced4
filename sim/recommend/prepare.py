"""Before any simulation: check the spec's names, expand the space and judge every
candidate on its configuration and its analytic bounds.

Each candidate ends up with a status:

- ``configuration``: vLLM would not start it (an invalid engine combination, a
  tensor-parallel size that does not divide the attention heads, no KV cache memory
  left, one ``max_model_len`` request does not fit: ``kvsim budget``'s checks);
- ``infeasible``: an SLO cannot be met even at zero load (:mod:`sim.recommend.bounds`);
- ``open``: to be searched, with its rate bound (the search's ``high``), ``low`` and
  its optimistic score (the score at that bound, :mod:`sim.recommend.rank`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.app.run import RunSpec
from sim.app.setup import ResolvedRun, resolve_run
from sim.recommend.bounds import candidate_bounds
from sim.recommend.prices import gpu_price, price_table
from sim.recommend.rank import Scoring
from sim.recommend.sample import LengthSample, draw_lengths
from sim.recommend.space import Candidate, config_hash, expand, heads_allow
from sim.recommend.spec import RecommendError, RecommendSpec
from sim.recommend.vllm_command import serve_command
from workloads.errors import WorkloadError
from workloads.loader import YAML_SUFFIXES, load_spec, preset_path
from workloads.overrides import RATED_ARRIVALS
from workloads.spec import WorkloadSpec


@dataclass
class Prepared:
    """A checked spec: its workload, prices, scoring and every candidate's entry
    (``entries``, in expansion order; ``resolved`` by key for the open ones)."""

    spec: RecommendSpec
    source: str
    model: str
    workload: str
    workload_spec: WorkloadSpec
    lengths: LengthSample
    scoring: Scoring
    prices: dict[str, float | None]
    entries: list[dict[str, Any]]
    candidates: dict[str, Candidate]
    resolved: dict[str, ResolvedRun]


def _workload(spec: RecommendSpec, source: str) -> tuple[str, WorkloadSpec, Path, str]:
    """``(workload argument for runs, spec, base directory, file name)``; the path is
    made absolute so worker processes find it."""
    text = spec.workload
    path = preset_path(text)
    workload = text
    if path is None:
        path = Path(text).expanduser()
        if path.suffix.lower() not in YAML_SUFFIXES:
            raise RecommendError(
                f"{source}: workload: recommend needs a preset or a workload YAML spec "
                f"(got {text!r}; a trace has no rate to vary)"
            )
        workload = str(path.resolve())
    try:
        wspec = load_spec(path, text)
    except WorkloadError as e:
        raise RecommendError(str(e)) from None
    kind = wspec.arrival.type if wspec.arrival is not None else "stages"
    if kind not in RATED_ARRIVALS:
        raise RecommendError(
            f"{source}: workload: {text} has arrival type {kind!r}; recommend "
            f"sets arrival.rate, so it needs one of {', '.join(RATED_ARRIVALS)}"
        )
    return workload, wspec, path.parent, path.name


def _model(spec: RecommendSpec) -> str:
    path = Path(spec.model).expanduser()
    return str(path.resolve()) if path.exists() else spec.model


def prepare(spec: RecommendSpec, source: str, base_dir: Path | None = None) -> Prepared:
    """Check and judge everything short of simulating; RecommendError on bad input."""
    workload, wspec, wdir, wfile = _workload(spec, source)
    model = _model(spec)
    try:
        candidates = expand(spec)
        table = price_table(spec, source, base_dir)
        prices = {c.gpu: gpu_price(c.gpu_arg, table) for c in candidates}
        heads = {tp: heads_allow(model, tp) for tp in {c.tensor_parallel_size for c in candidates}}
    except ValueError as e:  # CatalogError: an unknown GPU or model
        raise RecommendError(f"{source}: {e}") from None
    lengths = draw_lengths(wspec, wdir, wfile)
    by_price = spec.goal == "cost" and all(p is not None for p in prices.values())
    judging = _Judging(
        spec=spec,
        workload=workload,
        model=model,
        lengths=lengths,
        scoring=Scoring(spec.goal, spec.target_rate, by_price),
        slo=spec.slo.bounds(),
        workload_dump=wspec.model_dump(mode="json"),
    )
    entries, by_key, resolved_by_key = [], {}, {}
    for cand in candidates:
        entry, resolved = judging.judge(cand, prices[cand.gpu], heads[cand.tensor_parallel_size])
        entries.append(entry)
        by_key[cand.key] = cand
        if resolved is not None:
            resolved_by_key[cand.key] = resolved
    return Prepared(
        spec=spec,
        source=source,
        model=model,
        workload=workload,
        workload_spec=wspec,
        lengths=lengths,
        scoring=judging.scoring,
        prices=prices,
        entries=entries,
        candidates=by_key,
        resolved=resolved_by_key,
    )


@dataclass(frozen=True)
class _Judging:
    """What every candidate is judged with: the spec, the workload argument for runs,
    the model, the workload's drawn lengths, the scoring, the SLO bounds (seconds) and
    the workload spec as JSON (for the configuration hash)."""

    spec: RecommendSpec
    workload: str
    model: str
    lengths: LengthSample
    scoring: Scoring
    slo: dict[str, float]
    workload_dump: dict[str, Any]

    def judge(
        self, cand: Candidate, price: float | None, heads_reason: str | None
    ) -> tuple[dict[str, Any], ResolvedRun | None]:
        """``(entry, resolved)`` of one candidate: its entry with its status
        (``configuration``, ``infeasible`` or ``open``), and its resolved run when it
        is open (None otherwise)."""
        entry: dict[str, Any] = {
            "key": cand.key,
            "gpu": cand.gpu,
            "tensor_parallel_size": cand.tensor_parallel_size,
            "settings": dict(cand.settings),
            "price_per_gpu_hour": price,
            "status": "open",
            "reason": None,
        }
        reason = cand.error or heads_reason
        resolved = None
        if reason is None:
            assert cand.engine is not None
            try:
                run_spec = RunSpec(
                    workload=self.workload, model=self.model, gpu=cand.gpu_arg, engine=cand.engine
                )
                resolved = resolve_run(run_spec)
            except ValueError as e:
                reason = str(e)
        if reason is not None or resolved is None:
            entry.update(status="configuration", reason=reason)
            return entry, None
        return entry, (resolved if self._judge_bounds(entry, cand, resolved, price) else None)

    def _judge_bounds(
        self, entry: dict[str, Any], cand: Candidate, resolved: ResolvedRun, price: float | None
    ) -> bool:
        """Fill a startable candidate's engine, serve command and analytic bounds;
        True when it stays open (then with its search range, optimistic score and
        hash), False when the bounds make it infeasible."""
        spec = self.spec
        assert cand.engine is not None
        entry["engine"] = {
            **cand.engine.model_dump(mode="json"),
            "max_num_seqs": resolved.max_num_seqs,
            "max_num_batched_tokens": resolved.max_num_batched_tokens,
            "max_model_len": resolved.max_model_len,
        }
        entry["num_gpu_blocks"] = resolved.num_gpu_blocks
        entry["vllm_serve"] = serve_command(spec.model, resolved, cand.engine)
        bounds = candidate_bounds(
            resolved, self.lengths.within(resolved.max_model_len), self.slo, spec.search.bound_slack
        )
        entry["bounds"] = bounds.to_dict()
        if bounds.infeasible:
            entry.update(status="infeasible", reason="; ".join(bounds.infeasible))
            return False
        high = bounds.rate_bound
        if high <= 0:
            entry.update(status="infeasible", reason=f"the {bounds.binding} bound is 0 req/s")
            return False
        low = high * spec.search.low_fraction
        entry["search_range"] = {"low": low, "high": high}
        entry["optimistic_score"] = self.scoring.score(high, cand.tensor_parallel_size, price)
        entry["hash"] = config_hash(cand, spec, self.workload_dump, {"low": low, "high": high})
        return True


def plan_payload(prep: Prepared, entry: dict[str, Any]) -> dict[str, Any]:
    """The PlanSpec (as a mapping) of an open candidate's max_rate search."""
    spec = prep.spec
    cand = prep.candidates[entry["key"]]
    assert cand.engine is not None
    search = spec.search
    return {
        "workload": prep.workload,
        "model": prep.model,
        "gpu": cand.gpu_arg,
        "engine": cand.engine.model_dump(mode="json"),
        "num_requests": search.num_requests,
        "seeds": list(search.seeds),
        "slo": spec.slo.bounds(),
        "question": "max_rate",
        "search": {
            "low": entry["search_range"]["low"],
            "high": entry["search_range"]["high"],
            "rel_tol": search.rel_tol,
            "max_probes": search.max_probes,
        },
        "length": search.length.model_dump(mode="json"),
    }
