"""Exact fast-forward: runs with it on and off must write byte-identical records.

``CASES`` random small workloads (light and heavy load, shared prefixes, sessions,
priorities, KV pressure with preemption, chunked prefill and prefix caching on and
off, constant and roofline latency, a hybrid sliding-window model; the synchronous
loop or async scheduling, vLLM 0.33.0's default) are simulated both ways with
:func:`sim.app.run.simulate`; ``requests.csv``, ``steps.csv``, ``decisions.jsonl`` and the
summary (less wall time) must match exactly. Every third case drawn synchronous also
runs with async scheduling on one replica (where the async loop fast-forwards). Unit
tests cover :func:`kvcore.fast_forward.plan_decode_stretch`'s stopping rules
(tests/test_fast_forward_async.py: the async loop's).
"""

from __future__ import annotations

import inspect
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvcore.block_hashing import BlockHasher
from kvcore.fast_forward import plan_decode_stretch
from kvcore.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from kvcore.request import Request
from kvcore.scheduler import Scheduler
from kvcore.scheduler_config import SchedulerConfig
from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec, simulate
from sim.app.setup import resolve_run
from sim.engine.cluster import Cluster
from sim.engine.regime import decide_regime, stepping_part
from sim.engine.replica import SAMPLE_TOKEN_ID, ReplicaEngine
from sim.engine.stretch_arrivals import ArrivalStretchRunner

CASES = 200
FILES = ("requests.csv", "steps.csv", "decisions.jsonl")
_HAS_REPLICAS = "num_replicas" in inspect.signature(simulate).parameters


def _length(rng: random.Random, lo: int, hi: int) -> Any:
    if rng.random() < 0.4:
        return rng.randint(lo, hi)
    return {"type": "uniform", "min": lo, "max": hi}


def _case(i: int) -> tuple[dict[str, Any], dict[str, Any], str, int]:
    """Workload YAML data, engine settings, model and replica count of case ``i``."""
    rng = random.Random(1000 + i)
    heavy = rng.random() < 0.35
    pressure = rng.random() < 0.3
    wl: dict[str, Any] = {
        "name": f"ff{i}",
        "seed": i,
        "num_requests": rng.randint(15, 40) if not heavy else rng.randint(15, 30),
        "prompt_len": _length(rng, 8, 300),
        "output_len": _length(rng, 1, 150),
    }
    if heavy:
        wl["arrival"] = {"type": "burst"}
    else:
        wl["arrival"] = {
            "type": rng.choice(["poisson", "constant", "gamma"]),
            "rate": rng.choice([0.5, 2.0, 8.0, 30.0]),
        }
        if wl["arrival"]["type"] == "gamma":
            wl["arrival"]["burstiness"] = rng.choice([0.3, 1.0])
    if rng.random() < 0.4:
        wl["shared_prefix"] = {
            "num_groups": rng.randint(1, 4),
            "prefix_len": rng.randint(16, 200),
        }
    if rng.random() < 0.25:
        wl["sessions"] = {
            "turns": {"type": "uniform", "min": 2, "max": 4},
            "think_time_s": rng.choice([0.0, 0.2, 1.0]),
        }
    priority = rng.random() < 0.25
    if priority:
        wl["priority"] = {"values": [0, 1, 2]}
    eng: dict[str, Any] = {
        "enable_chunked_prefill": rng.random() < 0.7,
        "enable_prefix_caching": rng.random() < 0.75,
        "scheduling_policy": "priority" if priority else "fcfs",
        "max_num_seqs": rng.choice([4, 16, 64, 128]),
    }
    if rng.random() < 0.5:
        eng["latency_model"] = "constant"
        eng["constant_step_s"] = rng.choice([0.005, 0.02])
    if pressure:
        # Small cache: preemptions. max_model_len small enough to pass the budget check.
        eng["max_model_len"] = 1024
        eng["max_num_batched_tokens"] = 1024
    else:
        eng["max_model_len"] = 2048
    if not eng["enable_chunked_prefill"]:
        eng["max_num_batched_tokens"] = eng["max_model_len"]
    if rng.random() < 0.3:
        eng["block_size"] = rng.choice([32, 64])  # multiples of 16, as vLLM 0.33.0 takes
    model = "Gemma-3-27B" if rng.random() < 0.1 else "Llama-3.1-8B"
    if pressure:
        # Gemma-3's hybrid layout shares each block among about 8 layer groups.
        groups = 8 if model.startswith("Gemma") else 1
        blocks = rng.randint(1100, 2500) // eng.get("block_size", 16) + 2
        eng["num_gpu_blocks_override"] = blocks * groups
    replicas = rng.choice([1, 1, 2, 3]) if _HAS_REPLICAS else 1
    # Drawn last, so every other choice is what it was before async scheduling existed.
    # Fast-forward applies to both loops (to the async loop with one replica).
    eng["async_scheduling"] = rng.random() < 0.25
    return wl, eng, model, replicas


ASYNC_VARIANTS = [i for i in range(CASES) if i % 3 == 0 and not _case(i)[1]["async_scheduling"]]
"""Cases drawn synchronous that also run with async scheduling, on one replica."""
VARIANTS = [(i, "drawn") for i in range(CASES)] + [(i, "async") for i in ASYNC_VARIANTS]


def _variant(case: int, variant: str) -> tuple[dict[str, Any], dict[str, Any], str, int]:
    """Case ``case`` as drawn, or (``"async"``) with async scheduling on one replica."""
    wl, eng, model, replicas = _case(case)
    if variant == "async":
        eng["async_scheduling"] = True
        replicas = 1
    return wl, eng, model, replicas


def _strip_wall(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip_wall(v) for k, v in obj.items() if k != "wall_s"}
    if isinstance(obj, list):
        return [_strip_wall(v) for v in obj]
    return obj


ROUTERS = ("round_robin", "least_outstanding", "least_kv", "prefix_aware")


def _simulate(
    workload: Path,
    eng: dict[str, Any],
    model: str,
    replicas: int,
    out: Path,
    ff: bool,
    router: str = "round_robin",
) -> dict[str, Any]:
    resolved = resolve_run(RunSpec(workload=str(workload), model=model, engine=EngineConfig(**eng)))
    out.mkdir()
    kwargs: dict[str, Any] = {"num_replicas": replicas, "router": router} if replicas > 1 else {}
    return simulate(resolved, out, decisions=True, fast_forward=ff, **kwargs)


@pytest.mark.parametrize(("case", "variant"), VARIANTS, ids=[f"{i}-{v}" for i, v in VARIANTS])
def test_fast_forward_identical(case: int, variant: str, tmp_path: Path) -> None:
    """Fast-forward on and off write identical records and summaries."""
    wl, eng, model, replicas = _variant(case, variant)
    path = tmp_path / "wl.yaml"
    path.write_text(yaml.safe_dump(wl))
    # Routers that read the replicas' state (queue, KV usage, prefix cache) check that
    # fast-forward never lets an arrival see a replica mid-stretch.
    router = ROUTERS[case % len(ROUTERS)]
    on = _simulate(path, eng, model, replicas, tmp_path / "on", True, router)
    off = _simulate(path, eng, model, replicas, tmp_path / "off", False, router)
    assert _strip_wall(on) == _strip_wall(off)
    for name in FILES:
        a = (tmp_path / "on" / name).read_bytes()
        b = (tmp_path / "off" / name).read_bytes()
        assert a == b, f"{name} differs (case {case}: {wl}, {eng}, {model})"


def test_cases_cover_the_space() -> None:
    """The random cases include every feature the exactness claim is about."""
    cases = [_case(i) for i in range(CASES)]
    # Several replicas, open loop (stretches may pass the other replicas' steps), with
    # each router, state-reading ones included.
    routed = {
        ROUTERS[i % len(ROUTERS)]
        for i, (wl, _, _, replicas) in enumerate(cases)
        if replicas > 1 and "sessions" not in wl and wl["arrival"]["type"] != "burst"
    }
    assert routed == set(ROUTERS)
    assert any(wl["arrival"]["type"] == "burst" for wl, *_ in cases)
    assert any("shared_prefix" in wl for wl, *_ in cases)
    assert any("sessions" in wl for wl, *_ in cases)
    assert any(e["scheduling_policy"] == "priority" for _, e, *_ in cases)
    assert any("num_gpu_blocks_override" in e for _, e, *_ in cases)
    assert any(not e["enable_chunked_prefill"] for _, e, *_ in cases)
    assert any(not e["enable_prefix_caching"] for _, e, *_ in cases)
    assert any(e.get("latency_model") == "constant" for _, e, *_ in cases)
    assert any(m == "Gemma-3-27B" for *_, m, _ in cases)
    assert any(e["async_scheduling"] for _, e, *_ in cases)
    assert sum(not e["async_scheduling"] for _, e, *_ in cases) > CASES // 2
    # Async on one replica (where its fast-forward engages), with the same spread.
    single_async = [c for c in (_variant(*v) for v in VARIANTS) if c[1]["async_scheduling"]]
    single_async = [c for c in single_async if c[3] == 1]
    assert len(single_async) >= 60
    assert any(wl["arrival"]["type"] == "burst" for wl, *_ in single_async)
    assert any("sessions" in wl for wl, *_ in single_async)
    assert any("shared_prefix" in wl for wl, *_ in single_async)
    assert any(e["scheduling_policy"] == "priority" for _, e, *_ in single_async)
    assert any("num_gpu_blocks_override" in e for _, e, *_ in single_async)
    assert any(not e["enable_chunked_prefill"] for _, e, *_ in single_async)
    assert any(not e["enable_prefix_caching"] for _, e, *_ in single_async)
    assert any(e.get("latency_model") == "constant" for _, e, *_ in single_async)
    assert any(m == "Gemma-3-27B" for *_, m, _ in single_async)


def _light_engines(
    tmp_path: Path,
    fast_forward: bool | None,
    rate: float = 1.0,
    n: int = 20,
    async_scheduling: bool = False,
    **kwargs: Any,
) -> tuple[list[ReplicaEngine], dict]:
    """Simulate a light-load workload (the synchronous loop unless
    ``async_scheduling``); return the engines and the summary."""
    wl = {
        "name": "light",
        "seed": 3,
        "num_requests": n,
        "arrival": {"type": "poisson", "rate": rate},
        "prompt_len": 100,
        "output_len": 100,
    }
    path = tmp_path / "light.yaml"
    path.write_text(yaml.safe_dump(wl))
    engine = EngineConfig(async_scheduling=async_scheduling)
    resolved = resolve_run(RunSpec(workload=str(path), engine=engine))
    engines: list[ReplicaEngine] = []
    out = tmp_path / f"light-{fast_forward}-{len(kwargs)}{'-async' * async_scheduling}"
    out.mkdir()
    if fast_forward is not None:
        kwargs["fast_forward"] = fast_forward
    summary = simulate(resolved, out, on_cluster=lambda c: engines.extend(c.engines), **kwargs)
    return engines, summary


def _light_engine(tmp_path: Path, fast_forward: bool | None) -> tuple[ReplicaEngine, dict]:
    engines, summary = _light_engines(tmp_path, fast_forward)
    assert len(engines) == 1
    return engines[0], summary


def test_fast_forward_engages_by_default(tmp_path: Path) -> None:
    """At light load most steps are fast-forwarded, with no switch given."""
    assert inspect.signature(simulate).parameters["fast_forward"].default is True
    assert inspect.signature(Cluster).parameters["fast_forward"].default is True
    engine, summary = _light_engine(tmp_path, None)
    assert engine.stretches is not None
    assert engine.num_fast_forwarded > summary["num_steps"] // 2
    off, _ = _light_engine(tmp_path, False)
    assert off.num_fast_forwarded == 0


def test_async_fast_forward_engages(tmp_path: Path) -> None:
    """With async scheduling (vLLM 0.33.0's default loop) at light load most steps are
    fast-forwarded too, in stretches of many steps, and the records do not change."""
    assert EngineConfig().async_scheduling is None  # unset: on, as in vLLM 0.33.0
    runs = {}
    for ff in (True, False):
        engines, summary = _light_engines(tmp_path, ff, async_scheduling=True)
        assert len(engines) == 1 and engines[0].batch_queue is not None
        out = tmp_path / f"light-{ff}-0-async"
        runs[ff] = (engines[0], summary, [(out / f).read_bytes() for f in FILES[:2]])
    engine, summary, files = runs[True]
    assert engine.stretches is not None
    assert engine.num_fast_forwarded > summary["num_steps"] // 2
    assert engine.num_fast_forwarded / engine.num_stretches > 5
    assert runs[False][0].num_fast_forwarded == 0
    assert files == runs[False][2]
    assert _strip_wall(summary) == _strip_wall(runs[False][1])


def test_async_stretches_admit_arrivals(tmp_path: Path) -> None:
    """With async scheduling under load, most arrivals are admitted by a stretch's
    first iteration instead of a stepped one, and the records are stepping's."""
    runs = {}
    for ff in (True, False):
        engines, summary = _light_engines(tmp_path, ff, rate=20.0, n=80, async_scheduling=True)
        out = tmp_path / f"light-{ff}-0-async"
        runs[ff] = (engines[0], summary, [(out / f).read_bytes() for f in FILES[:2]])
    engine, summary, files = runs[True]
    runner = engine.stretches
    assert isinstance(runner, ArrivalStretchRunner)
    # Admitted in a stretch's first iteration, or taken ahead from the workload's feed.
    assert runner.num_joined + getattr(runner, "num_fed", 0) > 40
    assert files == runs[False][2]
    assert _strip_wall(summary) == _strip_wall(runs[False][1])


def test_fast_forward_engages_with_several_replicas(tmp_path: Path) -> None:
    """With an open-loop workload, one replica's stretch runs past the other replicas'
    steps (only arrivals bound it): most steps are fast-forwarded, results unchanged."""
    runs = {}
    for ff in (True, False):
        engines, summary = _light_engines(
            tmp_path, ff, rate=10.0, n=60, num_replicas=2, router="least_kv"
        )
        assert len(engines) == 2
        out = tmp_path / f"light-{ff}-2"
        runs[ff] = (engines, summary, [(out / f).read_bytes() for f in FILES[:2]])
    engines, summary, files = runs[True]
    assert sum(e.num_fast_forwarded for e in engines) > summary["num_steps"] // 2
    # Stretches span many steps (about one per step if each replica's steps cut the
    # other's stretches).
    steps_per_stretch = sum(e.num_fast_forwarded for e in engines) / sum(
        e.num_stretches for e in engines
    )
    assert steps_per_stretch > 5
    assert files == runs[False][2]
    assert _strip_wall(summary) == _strip_wall(runs[False][1])


CHECKED = [v for v in VARIANTS if v[1] == "async"][:4] + [(i, "drawn") for i in range(6)]
"""A few variants of both loops, run again in check mode."""


@pytest.mark.parametrize(("case", "variant"), CHECKED, ids=[f"{i}-{v}" for i, v in CHECKED])
def test_stretch_starts_are_the_steps_starts(case: int, variant: str, tmp_path: Path) -> None:
    """The recorder takes a stretch's step starts from its segment instead of summing
    its durations again: in check mode each stretch asserts the two are equal, and the
    per-step starts, durations and KV usage the summary reads equal a stepped run's."""
    wl, eng, model, replicas = _variant(case, variant)
    path = tmp_path / "wl.yaml"
    path.write_text(yaml.safe_dump(wl))
    kwargs: dict[str, Any] = {"num_replicas": replicas} if replicas > 1 else {}
    kept = {}
    for ff in (True, False):
        spec = RunSpec(workload=str(path), model=model, engine=EngineConfig(**eng))
        clusters: list[Any] = []
        out = tmp_path / f"ff-{ff}"
        out.mkdir()
        simulate(
            resolve_run(spec), out, check=ff, fast_forward=ff, on_cluster=clusters.append, **kwargs
        )
        engine = clusters[0].engines[0]
        kept[ff] = (engine.steps.start_s, engine.steps.duration_s, engine.steps.kv_usage)
        if ff and variant == "async":
            assert engine.num_stretches > 0
    assert kept[True] == kept[False]


# ---- plan_decode_stretch ------------------------------------------------------------

BLOCK = 16


def _scheduler(num_blocks: int, max_model_len: int = 4096, caching: bool = True) -> Scheduler:
    config = KVCacheConfig(
        num_blocks, [], [KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=BLOCK))]
    )
    return Scheduler(
        SchedulerConfig(max_model_len=max_model_len, max_num_batched_tokens=4096, max_num_seqs=64),
        config,
        enable_caching=caching,
    )


def _add(sched: Scheduler, rid: str, prompt: int, max_tokens: int) -> None:
    ids = [1000 + hash(rid) % 1000 + i for i in range(prompt)]
    sched.add_request(Request(rid, ids, max_tokens, block_hasher=BlockHasher.from_name(BLOCK)))


def _step(sched: Scheduler) -> None:
    out = sched.schedule()
    sampled = {
        rid: [SAMPLE_TOKEN_ID]
        for rid in out.num_scheduled_tokens
        if not sched.requests[rid].is_prefill_chunk
    }
    sched.update_from_output(out, sampled)


def test_plan_ends_with_the_first_finish() -> None:
    """A request with ``r`` tokens left ends the stretch with its finishing step ``r``."""
    sched = _scheduler(200)
    _add(sched, "a", 40, 30)
    _add(sched, "b", 20, 10)
    _step(sched)  # prefill both: one output token each
    plan = plan_decode_stretch(sched, 1000)
    assert plan is not None
    # b has 9 tokens left: it finishes in the 9th step.
    assert plan.max_steps == 9 and plan.finishes
    short = plan_decode_stretch(sched, 5)
    assert short.max_steps == 5 and not short.finishes
    # Applying fewer steps than planned finishes nothing.
    _records, finished = plan.apply(8, SAMPLE_TOKEN_ID)
    assert finished == [] and len(sched.running) == 2


def test_plan_apply_through_a_finish_equals_stepping() -> None:
    """The finishing step frees the finished requests' blocks exactly as stepping does."""
    states = []
    for ff in (True, False):
        sched = _scheduler(40)
        _add(sched, "a", 30, 25)
        _add(sched, "b", 17, 12)
        _add(sched, "c", 40, 12)
        _step(sched)
        plan = plan_decode_stretch(sched, 1000)
        assert plan is not None and plan.max_steps == 11 and plan.finishes
        if ff:
            _records, finished = plan.apply(11, SAMPLE_TOKEN_ID)
            done = [r.request_id for r in finished]
        else:
            for _ in range(10):
                _step(sched)
            out = sched.schedule()
            result = sched.update_from_output(
                out, {rid: [SAMPLE_TOKEN_ID] for rid in out.num_scheduled_tokens}
            )
            done = result.finished_req_ids
        pool = sched.kv_cache_manager.block_pool
        queue = []
        blk = pool.free_block_queue.fake_free_list_head.next_free_block
        while blk is not pool.free_block_queue.fake_free_list_tail:
            queue.append(blk.block_id)
            blk = blk.next_free_block
        states.append(
            (
                done,
                [r.request_id for r in sched.running],
                sorted(sched.finished_req_ids),
                queue,
                pool.num_cached_blocks,
                sched.kv_cache_manager.get_block_ids("a"),
            )
        )
    assert states[0][0] == ["b", "c"]
    assert states[0] == states[1]


def test_plan_stops_at_max_model_len() -> None:
    """A request about to reach ``max_model_len`` ends the stretch before its finish."""
    sched = _scheduler(200, max_model_len=64)
    _add(sched, "a", 50, 100)
    _step(sched)  # 50 computed, 51 tokens
    plan = plan_decode_stretch(sched, 1000)
    assert plan is not None
    # Finishes when its length reaches 64: in the 13th step from now.
    assert plan.max_steps == 64 - 50 - 1 and plan.finishes


def test_plan_stops_before_an_unservable_block() -> None:
    """The stretch ends before the first block crossing the free blocks cannot cover."""
    sched = _scheduler(5)  # 4 usable blocks
    _add(sched, "a", 47, 100)  # 3 blocks; slot 48 fits, slot 49 needs block 4
    _add(sched, "b", 1, 100)
    _step(sched)
    assert sched.kv_cache_manager.block_pool.get_num_free_blocks() == 0
    # a holds 3 blocks (48 slots) and has 47 computed + 1 sampled: step 1 schedules
    # token 48 (needs 48 slots, fits), step 2 would need 49 slots: a fourth block.
    plan = plan_decode_stretch(sched, 1000)
    assert plan is not None
    assert plan.max_steps == 1
    sched2 = _scheduler(5)
    _add(sched2, "a", 48, 100)
    _add(sched2, "b", 1, 100)
    _step(sched2)
    assert plan_decode_stretch(sched2, 1000) is None


def test_plan_nothing_while_requests_wait() -> None:
    """Nothing is planned while a request waits, or before the prefill is done."""
    sched = _scheduler(200)
    _add(sched, "a", 40, 30)
    assert plan_decode_stretch(sched, 100) is None  # only waiting
    _step(sched)
    assert plan_decode_stretch(sched, 100) is not None
    _add(sched, "b", 10, 30)
    assert plan_decode_stretch(sched, 100) is None


def test_plan_apply_equals_stepping() -> None:
    """Applying k planned steps leaves the same blocks, hashes and tokens as k steps."""
    states = []
    for ff in (True, False):
        sched = _scheduler(100)
        _add(sched, "a", 30, 80)
        _add(sched, "b", 17, 80)
        _step(sched)
        plan = plan_decode_stretch(sched, 40)
        assert plan is not None and plan.max_steps == 40
        if ff:
            plan.apply(40, SAMPLE_TOKEN_ID)
        else:
            for _ in range(40):
                _step(sched)
        kvm = sched.kv_cache_manager
        states.append(
            (
                {r: kvm.get_block_ids(r) for r in ("a", "b")},
                {r: list(sched.requests[r].block_hashes) for r in ("a", "b")},
                {r: sched.requests[r].num_computed_tokens for r in ("a", "b")},
                kvm.block_pool.get_num_free_blocks(),
                kvm.block_pool.num_cached_blocks,
            )
        )
    assert states[0] == states[1]


def test_the_regime_is_decided_once_from_the_run() -> None:
    """Which regime an engine runs follows from the run's parts alone: one writer or
    several, a workload that reacts to finishes or not, client timeouts, a part that
    needs every step stepped, sliding-window attention."""

    class Workload:
        def __init__(self, reacts: bool, timeouts: bool = False) -> None:
            self.reacts_to_finish = reacts
            self.has_timeouts = timeouts

    class Window:
        window = 128

    class Latency:
        def __init__(self, *groups: Any) -> None:
            self.groups = groups

    sched = _scheduler(64)

    def decide(**kw: Any) -> Any:
        args: dict[str, Any] = dict(
            fast_forward=True,
            num_replicas=1,
            scheduler=sched,
            latency_model=Latency(),
            workload=Workload(False),
        )
        return decide_regime(**(args | kw))

    one = decide()
    assert one.fast_forward and one.one_writer and one.vector_decode and one.chained
    assert not decide(workload=Workload(True)).chained  # a closed loop: no chaining
    several = decide(num_replicas=2)
    assert several.fast_forward and not several.one_writer and not several.chained
    assert not decide(fast_forward=False).fast_forward
    assert not decide(workload=Workload(False, timeouts=True)).fast_forward
    windowed = decide(latency_model=Latency(Window()))
    assert not windowed.fast_forward and not windowed.vector_decode
    for part in ("offload", "spec", "lockstep"):
        flags = dict(offload=False, spec=False, lockstep=False) | {part: True}
        stepped_by = stepping_part(**flags)
        assert stepped_by is not None
        assert not decide(stepped_by=stepped_by).fast_forward
    assert stepping_part(offload=False, spec=False, lockstep=False) is None


def test_async_stretches_run_through_finishes_with_an_open_loop_workload(tmp_path) -> None:
    """A burst's drain (open loop: nothing reacts to a finish) is a few async stretches,
    not one per finish, and its records are those of stepping."""
    wl = {
        "name": "drain",
        "seed": 5,
        "num_requests": 24,
        "arrival": {"type": "burst"},
        "prompt_len": 40,
        "output_len": {"type": "uniform", "min": 20, "max": 300},
    }
    path = tmp_path / "drain.yaml"
    path.write_text(yaml.safe_dump(wl))
    spec = RunSpec(workload=str(path), engine=EngineConfig(async_scheduling=True))
    files = {}
    engines: list[ReplicaEngine] = []
    for ff in (True, False):
        out = tmp_path / f"drain-{ff}"
        out.mkdir()
        simulate(
            resolve_run(spec), out, fast_forward=ff, on_cluster=lambda c: engines.extend(c.engines)
        )
        files[ff] = [(out / f).read_bytes() for f in FILES[:2]]
    engine = engines[0]  # the fast-forwarded run's
    lines = (tmp_path / "drain-True" / "requests.csv").read_text().splitlines()[1:]
    finish_times = {line.split(",")[4] for line in lines}
    assert files[True] == files[False]
    assert len(finish_times) > 15  # requests finish at many different steps
    assert engine.num_stretches * 3 < len(finish_times)
