"""Show that the differential suite catches deliberately broken kvcore (not a pytest module).

    .venv/bin/python tests/conformance/mutation_demo.py [--traces 30] [--seed S]

Each mutant monkeypatches kvcore in this process only (no file changes), runs the
randomized comparison against vLLM (``.venv-vllm``) and prints the first mismatch.
Exit 0 when every mutant is caught, 1 otherwise.

Mutants:
  tail-free   freed unhashed blocks go to the tail of the free queue (vLLM: the head)
  last-hit    the last prompt token may be a prefix-cache hit (vLLM: never)
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from kvcore.block_pool import BlockPool  # noqa: E402
from kvcore.kv_cache_manager import KVCacheManager  # noqa: E402
from sim.conformance import DEFAULT_SEED  # noqa: E402
from sim.conformance.differential import run  # noqa: E402


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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", type=int, default=30)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--out-dir", default="conformance-mutants")
    args = p.parse_args()
    missed = []
    for name, (cls, attr, value) in MUTANTS.items():
        with patched(cls, attr, value):
            report = run(args.traces, args.seed, out_dir=os.path.join(args.out_dir, name))
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
