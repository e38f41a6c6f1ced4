"""Show that the differential suite catches deliberately broken kvcore (not a pytest module).

    .venv/bin/python tests/conformance/mutation_demo.py [--traces 30] [--seed S]
    .venv/bin/python tests/conformance/mutation_demo.py --async-scheduling
    .venv/bin/python tests/conformance/mutation_demo.py --spec-decode
    .venv/bin/python tests/conformance/mutation_demo.py --pd

Each mutant monkeypatches kvcore in this process only (no file changes), runs the
randomized comparison against vLLM (``.venv-vllm``) and prints the first mismatch.
Exit 0 when every mutant is caught, 1 otherwise. kvcore runs from its sources here
(``KVSIM_PURE_PYTHON=1``): compiled classes cannot be patched.

Mutants (synchronous traces):
  tail-free        freed unhashed blocks go to the tail of the free queue (vLLM: the head)
  last-hit         the last prompt token may be a prefix-cache hit (vLLM: never)
Mutants (``--async-scheduling``: vLLM's AsyncScheduler and batch queue):
  apply-early      a batch's output is applied before the next batch is scheduled
                   (vLLM: only when the queue of 2 is full or nothing more can run)
  no-placeholders  scheduling a sampling step leaves no output placeholder, so the
                   next step cannot be planned before the token comes back
  placeholder-stop the max_tokens check of running requests ignores placeholders: a
                   request is scheduled once more although the step in flight
                   already samples its last token
Mutants (``--spec-decode``: speculative decoding, synchronous and async traces):
  accept-rejected  one rejected draft of each step is counted as accepted: it stays
                   in the request's computed tokens (vLLM rolls back every one)
  chunk-drafts     drafts proposed after a partial prefill chunk are kept for the
                   request's next step (vLLM drops them)
  eagle-hashes     EAGLE's block hashes leave out the token after the block, so a
                   block is a prefix hit before the drafter's KV in it is final
Mutants (``--pd``: P/D disaggregation with vLLM's NIXL connector, scheduler side):
  early-free       a prefill instance frees a finished request's blocks at once and
                   issues no send (vLLM holds them until the decode side read them)
  load-one-short   a decode instance leaves the prompt's last token out of the load
                   (vLLM loads it all and recomputes that token only to sample)
  no-deferred-free a decode instance under async scheduling frees and preempts
                   without waiting for the batch in flight that may write the blocks
  keep-stale       a prefill instance under async scheduling delivers the output in
                   flight of a preempted request (vLLM drops it: its hand-off broke)
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
if __name__ == "__main__":
    os.environ["KVSIM_PURE_PYTHON"] = "1"  # before kvcore is imported

from kvcore.async_scheduler import AsyncScheduler  # noqa: E402
from kvcore.batch_queue import Batch, BatchQueue  # noqa: E402
from kvcore.block_pool import BlockPool  # noqa: E402
from kvcore.kv_cache_manager import KVCacheManager  # noqa: E402
from kvcore.nixl_connector import NixlConnectorScheduler  # noqa: E402
from kvcore.scheduler import Scheduler  # noqa: E402
from kvcore.spec_decode import SpeculativeConfig  # noqa: E402
from sim.conformance import DEFAULT_SEED  # noqa: E402
from sim.conformance.differential import (  # noqa: E402
    DEFAULT_VLLM_PYTHON,
    first_step_mismatch,
    run,
)
from sim.conformance.generate import random_case  # noqa: E402
from sim.conformance.oracle_batch import oracle_step_lines  # noqa: E402
from sim.conformance.pd import compare as pd_compare  # noqa: E402
from sim.conformance.pd import run_kvcore_or_error as pd_run_kvcore  # noqa: E402
from sim.conformance.pd import run_oracle as pd_run_oracle  # noqa: E402
from sim.conformance.pd_cases import early_free, load_one_short  # noqa: E402
from sim.conformance.pd_cases import random_case as pd_random_case  # noqa: E402
from sim.conformance.replay_kvcore import run_kvcore_steps  # noqa: E402


def _tail_free(self: BlockPool, ordered_blocks) -> None:
    freed = []
    for block in ordered_blocks:
        if block.is_null:
            continue
        block.ref_cnt -= 1
        if block.ref_cnt == 0:
            freed.append(block)
    self.free_block_queue.append_n(freed)


def _last_hit(original: Callable) -> Callable:
    def get_computed_blocks(self: KVCacheManager, request, max_cache_hit_length=None):
        if max_cache_hit_length is None:
            max_cache_hit_length = request.num_tokens
        return original(self, request, max_cache_hit_length)

    return get_computed_blocks


def _apply_early(original: Callable) -> Callable:
    def schedule_next(self: BatchQueue) -> tuple[Batch | None, bool]:
        batch, _ = original(self)
        return batch, bool(self.queue)  # wait for (and apply) every batch at once

    return schedule_next


def _placeholder_stop(original: Callable) -> Callable:
    def _schedule_running(self: Scheduler, plan, threshold: int) -> None:
        # max_tokens feeds only that check in the running pass: lift it out of reach.
        saved = [(r, r.max_tokens) for r in self.running]
        for r, m in saved:
            r.max_tokens = m + 10**9
        try:
            original(self, plan, threshold)
        finally:
            for r, m in saved:
                r.max_tokens = m

    return _schedule_running


def _accept_rejected(original: Callable) -> Callable:
    def update_from_output(self: Scheduler, scheduler_output, sampled, *args, **kwargs):
        result = original(self, scheduler_output, sampled, *args, **kwargs)
        for rid, drafts in scheduler_output.scheduled_spec_decode_tokens.items():
            request = self.requests.get(rid)
            tokens = sampled.get(rid)
            if request is None or request.is_finished() or not tokens:
                continue
            if len(drafts) > len(tokens) - 1 and not request.num_stale_output_tokens:
                request.num_computed_tokens += 1  # one rejected draft kept
        return result

    return update_from_output


def _chunk_drafts(self: Scheduler, draft_token_ids) -> None:
    for rid, drafts in draft_token_ids.items():
        request = self.requests.get(rid)
        if request is not None and not request.is_finished():
            request.spec_token_ids = list(drafts)


@contextmanager
def patched(cls: type, name: str, value: Callable) -> Iterator[None]:
    """Replace ``cls.name`` for the duration of the block."""
    saved = getattr(cls, name)
    setattr(cls, name, value)
    try:
        yield
    finally:
        setattr(cls, name, saved)


MUTANTS = {
    "tail-free": (BlockPool, "free_blocks", _tail_free),
    "last-hit": (
        KVCacheManager,
        "get_computed_blocks",
        _last_hit(KVCacheManager.get_computed_blocks),
    ),
}

ASYNC_MUTANTS = {
    "apply-early": (BatchQueue, "schedule_next", _apply_early(BatchQueue.schedule_next)),
    "no-placeholders": (
        AsyncScheduler,
        "_update_after_schedule",
        Scheduler._update_after_schedule,
    ),
    "placeholder-stop": (
        Scheduler,
        "_schedule_running",
        _placeholder_stop(Scheduler._schedule_running),
    ),
}


SPEC_MUTANTS = {
    "accept-rejected": (
        Scheduler,
        "update_from_output",
        _accept_rejected(Scheduler.update_from_output),
    ),
    "chunk-drafts": (Scheduler, "update_draft_token_ids", _chunk_drafts),
    "eagle-hashes": (
        SpeculativeConfig,
        "num_hash_lookahead_tokens",
        lambda self, enable_prefix_caching: 0,
    ),
}


_nixl_init = NixlConnectorScheduler.__init__


def _keep_stale(self: NixlConnectorScheduler, *args, **kwargs) -> None:
    _nixl_init(self, *args, **kwargs)
    self.requires_kv_delivery = False


PD_MUTANTS = {
    # name: (role, async scheduling, class, attribute, replacement)
    "early-free": ("prefill", False, NixlConnectorScheduler, "request_finished", early_free),
    "load-one-short": (
        "decode",
        False,
        NixlConnectorScheduler,
        "get_num_new_matched_tokens",
        load_one_short,
    ),
    "no-deferred-free": (
        "decode",
        True,
        Scheduler,
        "_request_blocks_can_be_freed",
        lambda self, request: True,
    ),
    "keep-stale": ("prefill", True, NixlConnectorScheduler, "__init__", _keep_stale),
}


def pd_mutants_caught(traces: int, seed: int) -> list[str]:
    """The P/D mutants, each against ``traces`` cases of its role and loop (one vLLM
    run for all); prints each one's first mismatch and returns those not caught."""
    kinds = sorted({(role, a) for role, a, *_ in PD_MUTANTS.values()})
    cases = {k: [pd_random_case(seed, i, *k) for i in range(traces)] for k in kinds}
    flat = [c for k in kinds for c in cases[k]]
    lines = pd_run_oracle(str(DEFAULT_VLLM_PYTHON), flat, timeout=1800)
    theirs = {k: lines[j * traces : (j + 1) * traces] for j, k in enumerate(kinds)}
    missed = []
    for name, (role, a, cls, attr, value) in PD_MUTANTS.items():
        with patched(cls, attr, value):
            found = [
                (i, d)
                for i, ((config, trace), v) in enumerate(zip(cases[role, a], theirs[role, a]))
                if (d := pd_compare(v, pd_run_kvcore(config, trace))) is not None
            ]
        loop = "async" if a else "sync"
        print(f"== mutant {name}: {len(found)} mismatching cases of {traces} {role} {loop} traces")
        if found:
            i, diff = found[0]
            print(f"case {i}: {diff.render()}")
        else:
            missed.append(name)
    return missed


def spec_mutants_caught(traces: int, seed: int) -> list[str]:
    """The speculative mutants against one vLLM run of ``traces`` cases (the oracle's
    lines do not depend on the mutant); prints each one's first mismatch and returns
    the names of those not caught. A mutant's replay is cut at ten times vLLM's
    steps (a livelock is shown at its first differing step)."""
    cases = [random_case(seed, i, spec_decode=True) for i in range(traces)]
    theirs = oracle_step_lines(cases, str(DEFAULT_VLLM_PYTHON))
    missed = []
    for name, (cls, attr, value) in SPEC_MUTANTS.items():
        with patched(cls, attr, value):
            found = []
            for i, ((config, trace), lines) in enumerate(zip(cases, theirs)):
                limit = 10 * len(lines or ()) + 100
                diff = first_step_mismatch(lines, run_kvcore_steps(config, trace, limit))
                if diff is not None:
                    found.append((i, diff))
        print(f"== mutant {name}: {len(found)} mismatching cases of {traces} traces")
        if found:
            i, diff = found[0]
            print(f"steps case {i}: {diff.render()}")
        else:
            missed.append(name)
    return missed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", type=int, default=30)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--out-dir", default="conformance-mutants")
    p.add_argument("--async-scheduling", action="store_true", help="the async mutants")
    p.add_argument("--spec-decode", action="store_true", help="the speculative mutants")
    p.add_argument("--pd", action="store_true", help="the P/D disaggregation mutants")
    args = p.parse_args()
    if args.pd:
        missed = pd_mutants_caught(args.traces, args.seed)
        if missed:
            print("NOT caught:", ", ".join(missed))
        return 1 if missed else 0
    if args.spec_decode:
        missed = spec_mutants_caught(args.traces, args.seed)
        if missed:
            print("NOT caught:", ", ".join(missed))
        return 1 if missed else 0
    missed = []
    mutants = ASYNC_MUTANTS if args.async_scheduling else MUTANTS
    plain = not args.async_scheduling
    for name, (cls, attr, value) in mutants.items():
        with patched(cls, attr, value):
            report = run(
                args.traces,
                args.seed,
                out_dir=os.path.join(args.out_dir, name),
                num_op_cases=40 if plain else 0,  # no scheduler in them
                num_sizing_cases=40 if plain else 0,
                async_scheduling=args.async_scheduling,
            )
        found = len(report.mismatches)
        print(
            f"== mutant {name}: {found} mismatching cases of {report.traces} traces, "
            f"{report.op_cases} op sequences"
        )
        if report.mismatches:
            print(report.mismatches[0].render())
        else:
            missed.append(name)
    if missed:
        print("NOT caught:", ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
