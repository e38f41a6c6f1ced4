"""The random cases of the P/D conformance (:mod:`sim.conformance.pd`), the events
they exercise, the mutants the suite must catch, and a run of the whole comparison
for ``kvsim conformance --pd``."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from kvcore.nixl_connector import NixlConnectorScheduler
from kvcore.request import Request
from sim.conformance.pd import compare, run_kvcore_or_error, run_oracle
from sim.conformance.report import Mismatch, Report, write_case


def random_case(
    seed: int, index: int, role: str, async_scheduling: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One random case on a ``role`` instance: shared prompt prefixes arriving over
    time, a small GPU cache (preemptions, admission waits while loads hold blocks),
    transfers of 1-4 steps, unread leases, failed loads, aborts, sometimes push mode."""
    rng = random.Random(f"pd-{role}-{int(async_scheduling)}-{seed}-{index}")
    bs = 16
    cfg = _random_config(rng, role, async_scheduling, bs)
    trace = _random_trace(rng, role, bs)
    longest = max(len(r["prompt_token_ids"]) + r["max_tokens"] for r in trace)
    cfg["num_gpu_blocks"] = max(cfg["num_gpu_blocks"], -(-longest // bs) + 2)
    if rng.random() < 0.2:  # whole prefills: the budget must hold max_model_len
        cfg["enable_chunked_prefill"] = False
        cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], longest)
    return cfg, trace


def _random_config(
    rng: random.Random, role: str, async_scheduling: bool, bs: int
) -> dict[str, Any]:
    """A case's knobs (``bs``: block size in tokens); the GPU cache is grown later to
    fit the longest request."""
    return {
        "role": role,
        "kv_both": rng.random() < 0.15,
        "mode": "push" if rng.random() < 0.25 else "pull",
        "async_scheduling": async_scheduling,
        "kv_load_failure_policy": rng.choice(["fail", "recompute"]),
        "block_size": bs,
        "num_gpu_blocks": rng.randint(8, 24) if role == "prefill" else rng.randint(10, 40),
        "max_num_seqs": rng.randint(2, 8),
        # A prefill instance preempts when chunked prefills overlap: smaller budgets.
        "max_num_batched_tokens": rng.choice(
            [32, 64, 64, 128] if role == "prefill" else [64, 128, 256]
        ),
        "long_prefill_token_threshold": rng.choice([0, 0, 0, 32]),
        "policy": rng.choice(["fcfs", "fcfs", "priority"]),
        "lease_steps": rng.randint(2, 12),
    }


def _random_trace(rng: random.Random, role: str, bs: int) -> list[dict[str, Any]]:
    """6-20 requests over 1-3 shared prompt prefixes, arriving 0-8 steps apart; about
    15% of them aborted up to 8 steps after their arrival."""
    prefixes = [
        [rng.randrange(50_000) for _ in range(rng.choice([16, 32, 48, 64, 96]))]
        for _ in range(rng.randint(1, 3))
    ]
    trace = []
    step = 0
    for i in range(rng.randint(6, 20)):
        step += rng.choice([0, 0, 1, 2, 4, 8])
        prompt = list(rng.choice(prefixes))
        prompt += [rng.randrange(50_000) for _ in range(rng.choice([0, 1, 5, 16, 23, 40]))]
        req: dict[str, Any] = {
            "request_id": f"r{i}",
            "arrival_step": step,
            "prompt_token_ids": prompt,
            "priority": rng.randint(0, 2),
            "xfer_steps": rng.randint(1, 4),
        }
        _draw_transfer(rng, req, role, i, bs)
        if rng.random() < 0.15:
            req["abort_step"] = step + rng.randint(0, 8)
        trace.append(req)
    return trace


def _draw_transfer(rng: random.Random, req: dict[str, Any], role: str, i: int, bs: int) -> None:
    """Fill in request ``i``'s role-specific fields: its output length, the fake
    worker's fate of its transfer (read lease, failed load) and, but for about 15%
    plain requests, its ``kv_transfer_params``."""
    plain = rng.random() < 0.15
    prompt = req["prompt_token_ids"]
    if role == "prefill":
        req["max_tokens"] = 1 if rng.random() < 0.4 else rng.randint(2, 16)
        req["read"] = rng.random() < 0.8
        if not plain:
            req["kv_transfer_params"] = {"do_remote_decode": True, "do_remote_prefill": False}
    else:
        req["max_tokens"] = rng.randint(1, 30)
        req["fail_load"] = rng.random() < 0.15
        if not plain:
            req["kv_transfer_params"] = {
                "do_remote_prefill": True,
                "do_remote_decode": False,
                "remote_block_ids": [list(range(1, 1 + -(-len(prompt) // bs)))],
                "remote_engine_id": "kvsim-prefill",
                "remote_request_id": f"p{i}",
                "remote_host": "localhost",
                "remote_port": 5600,
                "tp_size": 1,
                "remote_num_tokens": len(prompt),
            }


def coverage(lines_per_case: list[list[dict[str, Any]]]) -> dict[str, int]:
    """How often the cases exercised each P/D event (from the step lines)."""
    counts = dict.fromkeys(
        (
            "loads",
            "failed_loads",
            "notify_only_recvs",
            "sends",
            "not_processed",
            "push_registrations",
            "push_finished",
            "preemptions",
            "abort_while_loading",
            "steps_with_held_blocks",
        ),
        0,
    )
    for lines in lines_per_case:
        loading: set[str] = set()
        for x in lines:
            if x.get("type") != "step":
                continue
            meta = x.get("meta")
            if meta is not None:
                counts["loads"] += sum(1 for r in meta["recv"] if r[3])
                counts["notify_only_recvs"] += sum(1 for r in meta["recv"] if not r[3])
                counts["sends"] += len(meta["send"])
                counts["not_processed"] += len(meta["not_processed"])
                counts["push_registrations"] += len(meta["push_reg"])
                counts["push_finished"] += len(meta["push_fin"])
                counts["failed_loads"] += len(x["report"]["failed"])
                counts["preemptions"] += len(x["preempted"])
            counts["abort_while_loading"] += len(set(x["aborted"]) & loading)
            counts["steps_with_held_blocks"] += bool(x["held"])
            loading = set(x["waiting_for_kv"])
    return counts


_request_finished = NixlConnectorScheduler.request_finished


def early_free(
    self: NixlConnectorScheduler, request: Request, block_ids: tuple[list[int], ...]
) -> tuple[bool, dict[str, Any] | None]:
    """A broken prefill side: a finished request's blocks are freed at once and no
    send is issued (vLLM holds them until the decode side has read them)."""
    _, params = _request_finished(self, request, block_ids)
    self._reqs_need_send.pop(request.request_id, None)
    self._finished_request_blocks.pop(request.request_id, None)
    return False, params


ROLES = ("prefill", "decode")


def run_pd(
    num_traces: int,
    seed: int,
    vllm_python: str,
    out_dir: str | Path = "conformance-failures",
    async_scheduling: bool = False,
    timeout: float = 1200.0,
) -> Report:
    """``num_traces`` random cases per instance role through vLLM (one oracle process)
    and kvcore; a mismatching case is written to ``out_dir`` as
    ``pd_<role>_seed<S>_case<i>[_async].{trace,config}.json``."""
    t0 = time.perf_counter()
    report = Report(seed=seed, async_scheduling=async_scheduling, pd=True)
    cases = [
        (role, i, random_case(seed, i, role, async_scheduling))
        for role in ROLES
        for i in range(num_traces)
    ]
    theirs = run_oracle(vllm_python, [c for _, _, c in cases], timeout)
    for (role, i, (config, trace)), lines in zip(cases, theirs):
        report.traces += 1
        if lines and report.vllm_version is None:
            report.vllm_version = lines[0].get("vllm_version")
        report.steps += sum(1 for x in lines if x.get("type") == "step")
        diff = compare(lines, run_kvcore_or_error(config, trace))
        if diff is not None:
            name = f"pd_{role}_seed{seed}_case{i}" + ("_async" if async_scheduling else "")
            files = write_case(Path(out_dir), name, {"trace": trace, "config": config})
            report.mismatches.append(Mismatch(f"pd-{role}", i, diff, files))
    report.wall_s = time.perf_counter() - t0
    return report


_matched_tokens = NixlConnectorScheduler.get_num_new_matched_tokens


def load_one_short(
    self: NixlConnectorScheduler, request: Request, num_computed_tokens: int
) -> tuple[int | None, bool]:
    """A broken decode side: the prompt's last token is left out of the load (vLLM
    loads the whole prompt past the local hit and recomputes only to sample)."""
    count, load_async = _matched_tokens(self, request, num_computed_tokens)
    if load_async and count is not None and count > 1:
        return count - 1, True
    return count, load_async
