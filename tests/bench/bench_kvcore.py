"""Throughput of kvcore's BlockPool on a mixed operation trace, against vLLM's own.

A 10,000-block pool is held near 75% use while a pre-generated trace runs about
16% ``get_new_blocks`` (1-4 blocks), 16% ``cache_full_blocks``, 31% ``free_blocks``
(a request's tail, or the whole request, in reverse), 20% ``get_cached_block``
lookups and 16% ``touch`` of a cached block found by a lookup. The trace is drawn
once with a seeded ``numpy.random.Generator`` (kvcore's pool serves as the state
oracle while drawing, so every op is valid) and replayed, untimed setup aside, on
each implementation; best of ``--repeats`` runs, timed in process CPU time with the
garbage collector off, kvcore and vLLM runs interleaved in one process so that load
from other processes hits both alike. vLLM 0.33.0 lives in another venv
(``.venv-vllm``): when it is not importable here, the script reruns itself under that
interpreter with the repo on ``PYTHONPATH`` (kvcore needs only numpy, cbor2 and
xxhash). Both sides must end in the same state (free-queue order, cached blocks),
which cross-checks behaviour too.

Two ratios are printed: over the whole replay, and over pool time (the replay minus
the same replay on a no-op pool, which leaves out the replay loop and the method
dispatch both pay alike). ``--min-ratio`` applies to the pool-time ratio unless
``--gate replay``.

Usage (from the repo root)::

    .venv/bin/python tests/bench/bench_kvcore.py                # compare, need >= 2x
    .venv/bin/python tests/bench/bench_kvcore.py --no-vllm      # kvcore only
    .venv/bin/python tests/bench/bench_kvcore.py --min-ratio 1.5 --ops 500000 --repeats 7

Exit status 1 when kvcore/vLLM is below ``--min-ratio``, 2 on a state mismatch or
a failed vLLM run.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"

NUM_BLOCKS = 10_000
BLOCK_SIZE = 16
TARGET_USAGE = 0.75
ALLOC, CACHE, FREE, LOOKUP, TOUCH = range(5)
OP_NAMES = ("get_new_blocks", "cache_full_blocks", "free_blocks", "get_cached_block", "touch")
MIX = np.array([16, 16, 31, 20, 16], dtype=float) / 99.0
"""Op kinds in the order above (the brief's percentages, normalised)."""
DUPLICATE_HASH_RATE = 0.02
"""Share of newly cached blocks that reuse an existing hash (duplicate content)."""
LOOKUP_WINDOW = 20_000
"""Lookups and touches draw among the most recently cached hashes."""


class FakeRequest:
    """What both ``cache_full_blocks`` implementations read from a request."""

    __slots__ = (
        "block_hashes",
        "all_token_ids",
        "lora_request",
        "session_id",
        "mm_features",
        "cache_salt",
        "request_id",
    )

    def __init__(self, block_hashes: list[bytes]) -> None:
        self.block_hashes = block_hashes
        self.all_token_ids: list[int] = []
        self.lora_request = None
        self.session_id = None
        self.mm_features: list[Any] = []
        self.cache_salt = None
        self.request_id = "bench"


def hash_bytes(index: int) -> bytes:
    """Block hash number ``index`` (32 bytes, like sha256)."""
    return index.to_bytes(8, "big") * 4


# -- trace generation (kvcore process only) ----------------------------------------


def generate_trace(num_ops: int, warmup: int, seed: int) -> dict[str, np.ndarray]:
    """Draw ``warmup + num_ops`` ops; kvcore's BlockPool tracks the state meanwhile.

    Returns arrays ``op, a, b, c`` (see ``build_ops``), the per-slot hash lists
    (``slot_hash_start``/``slot_hash_len`` into ``slot_hashes``) and ``warmup``.
    """
    from kvcore.block_pool import BlockPool

    rng = np.random.default_rng(seed)
    total = warmup + num_ops
    kinds = rng.choice(5, size=total, p=MIX)
    u = rng.random((total, 3))
    pool = BlockPool(NUM_BLOCKS, enable_caching=True)
    usable = NUM_BLOCKS - 1
    op = np.empty(total, dtype=np.int8)
    a = np.zeros(total, dtype=np.int64)
    b = np.zeros(total, dtype=np.int64)
    c = np.zeros(total, dtype=np.int64)
    slot_blocks: list[list[Any]] = []  # kvcore blocks held per slot
    slot_cached: list[int] = []  # leading blocks of the slot already cached
    slot_hashes: list[list[int]] = []  # hash index per cached block of the slot
    live: list[int] = []  # live slots (swap-remove)
    live_pos: dict[int, int] = {}
    cacheable: set[int] = set()
    cacheable_list: list[int] = []  # may hold stale entries; filtered on use
    num_hashes = 0
    fallbacks = 0

    def add_live(s: int) -> None:
        live_pos[s] = len(live)
        live.append(s)

    def drop_live(s: int) -> None:
        i = live_pos.pop(s)
        last = live.pop()
        if last != s:
            live[i] = last
            live_pos[last] = i

    def recent_hash(x: float) -> int:
        lo = max(0, num_hashes - LOOKUP_WINDOW)
        return lo + int(x * (num_hashes - lo))

    for i in range(total):
        kind = int(kinds[i])
        x, y, z = u[i]
        free = pool.get_num_free_blocks()
        usage = 1.0 - free / usable
        if kind == TOUCH:
            hit = None
            if num_hashes:
                for t in range(4):
                    hit = pool.get_cached_block(hash_bytes(recent_hash((x + 0.618 * t) % 1.0)), [0])
                    if hit:
                        break
            if not hit or (hit[0].ref_cnt == 0 and usage > TARGET_USAGE + 0.01):
                kind = LOOKUP
                fallbacks += 1
            else:
                s = len(slot_blocks)
                pool.touch(hit)
                slot_blocks.append(list(hit))
                slot_cached.append(1)
                slot_hashes.append([])
                add_live(s)
                op[i], a[i], b[i] = TOUCH, s, hit[0].block_id
                continue
        if kind == CACHE:
            s = -1
            while cacheable_list:
                j = int(y * len(cacheable_list))
                cand = cacheable_list[j]
                cacheable_list[j] = cacheable_list[-1]
                cacheable_list.pop()
                if cand in cacheable:
                    s = cand
                    break
            if s < 0:
                kind = LOOKUP
                fallbacks += 1
            else:
                blocks = slot_blocks[s]
                nc = slot_cached[s]
                nf = nc + 1 + int(z * (len(blocks) - nc))
                hashes = slot_hashes[s]
                while len(hashes) < nf:
                    if num_hashes and rng.random() < DUPLICATE_HASH_RATE:
                        hashes.append(recent_hash(rng.random()))
                    else:
                        hashes.append(num_hashes)
                        num_hashes += 1
                req = FakeRequest([hash_bytes(h) for h in hashes])
                pool.cache_full_blocks(req, blocks, nc, nf, BLOCK_SIZE, 0)
                slot_cached[s] = nf
                if nf < len(blocks):
                    cacheable_list.append(s)
                else:
                    cacheable.discard(s)
                op[i], a[i], b[i], c[i] = CACHE, s, nc, nf
                continue
        if kind == FREE and not live:
            kind = ALLOC
            fallbacks += 1
        if kind == ALLOC:
            k = 1 + int(x * 4)
            if k > free and live:
                kind = FREE
                fallbacks += 1
            else:
                k = min(k, free)
                s = len(slot_blocks)
                slot_blocks.append(pool.get_new_blocks(k))
                slot_cached.append(0)
                slot_hashes.append([])
                add_live(s)
                cacheable.add(s)
                cacheable_list.append(s)
                op[i], a[i], b[i] = ALLOC, s, k
                continue
        if kind == FREE:
            s = live[int(y * len(live))]
            blocks = slot_blocks[s]
            j = len(blocks) if usage > TARGET_USAGE else 1
            c[i] = j == len(blocks)  # the whole request
            tail = blocks[-j:]
            del blocks[-j:]
            tail.reverse()
            pool.free_blocks(tail)
            slot_cached[s] = min(slot_cached[s], len(blocks))
            if not blocks:
                drop_live(s)
                cacheable.discard(s)
            elif slot_cached[s] >= len(blocks):
                cacheable.discard(s)
            op[i], a[i], b[i] = FREE, s, j
            continue
        # LOOKUP
        h = recent_hash(z) if num_hashes else 0
        op[i], a[i] = LOOKUP, h

    starts = np.zeros(len(slot_hashes), dtype=np.int64)
    lens = np.array([len(h) for h in slot_hashes], dtype=np.int64)
    if len(lens) > 1:
        starts[1:] = np.cumsum(lens)[:-1]
    flat = np.fromiter((h for hs in slot_hashes for h in hs), dtype=np.int64, count=int(lens.sum()))
    return {
        "op": op,
        "a": a,
        "b": b,
        "c": c,
        "slot_hash_start": starts,
        "slot_hash_len": lens,
        "slot_hashes": flat,
        "warmup": np.array([warmup]),
        "num_hashes": np.array([num_hashes]),
        "fallbacks": np.array([fallbacks]),
        "final_usage": np.array([pool.get_usage()]),
    }


# -- replay (both processes) -------------------------------------------------------


FREE_TAIL = 5
"""Decoded-only kind: free the last block of a slot (``FREE`` then means the whole slot)."""


def build_ops(
    trace: dict[str, np.ndarray],
    pool: Any,
    start: int,
    stop: int,
    requests: list[FakeRequest | None],
) -> list[tuple]:
    """Decode ops ``[start, stop)`` into tuples with their Python objects bound.

    ``(ALLOC, slot, k)``, ``(CACHE, slot, request, nc, nf)``, ``(FREE, slot)`` (all of
    the slot's blocks), ``(FREE_TAIL, slot)`` (its last block), ``(LOOKUP, hash)``,
    ``(TOUCH, slot, [block])``.
    """
    op = trace["op"][start:stop].tolist()
    a = trace["a"][start:stop].tolist()
    b = trace["b"][start:stop].tolist()
    c = trace["c"][start:stop].tolist()
    blocks = pool.blocks
    out: list[tuple] = []
    append = out.append
    for kind, x, y, z in zip(op, a, b, c):
        if kind == LOOKUP:
            append((LOOKUP, hash_bytes(x)))
        elif kind == CACHE:
            append((CACHE, x, requests[x], y, z))
        elif kind == TOUCH:
            append((TOUCH, x, [blocks[y]]))
        elif kind == FREE:
            if not z and y != 1:
                raise ValueError("partial frees release exactly one block")
            append((FREE if z else FREE_TAIL, x))
        else:
            append((kind, x, y))
    return out


def make_requests(trace: dict[str, np.ndarray]) -> list[FakeRequest | None]:
    """One fake request per slot that caches blocks, with its block hashes."""
    starts = trace["slot_hash_start"].tolist()
    lens = trace["slot_hash_len"].tolist()
    flat = trace["slot_hashes"].tolist()
    return [
        FakeRequest([hash_bytes(h) for h in flat[s : s + n]]) if n else None
        for s, n in zip(starts, lens)
    ]


def replay(pool: Any, ops: list[tuple], slots: list[Any]) -> None:
    """Run decoded ops on ``pool``; ``slots`` holds each slot's block list."""
    get_new_blocks = pool.get_new_blocks
    cache_full_blocks = pool.cache_full_blocks
    free_blocks = pool.free_blocks
    get_cached_block = pool.get_cached_block
    touch = pool.touch
    group0 = [0]
    for o in ops:
        kind = o[0]
        if kind == FREE:  # a whole request, tail first
            blocks = slots[o[1]]
            blocks.reverse()
            free_blocks(blocks)
        elif kind == LOOKUP:
            get_cached_block(o[1], group0)
        elif kind == FREE_TAIL:
            free_blocks((slots[o[1]].pop(),))
        elif kind == ALLOC:
            slots[o[1]] = get_new_blocks(o[2])
        elif kind == CACHE:
            cache_full_blocks(o[2], slots[o[1]], o[3], o[4], BLOCK_SIZE, 0)
        else:
            blk = o[2]
            touch(blk)
            slots[o[1]] = blk


def fingerprint(pool: Any) -> dict[str, int]:
    """State summary both implementations must agree on."""
    if pool.free_block_queue is None:  # NullPool
        return {}
    queue_ids = [blk.block_id for blk in pool.free_block_queue.get_all_free_blocks()]
    cached = sorted(blk.block_id for blk in pool.blocks if blk.block_hash is not None)
    return {
        "num_free": len(queue_ids),
        "queue_crc": zlib.crc32(np.array(queue_ids, dtype=np.int64).tobytes()),
        "num_cached_blocks": len(cached),
        "cached_crc": zlib.crc32(np.array(cached, dtype=np.int64).tobytes()),
    }


class Runner:
    """Times one implementation on the trace: one fresh pool per ``run()``."""

    def __init__(self, make_pool: Any, trace: dict[str, np.ndarray]) -> None:
        self.make_pool = make_pool
        self.trace = trace
        self.fingerprint: dict[str, int] | None = None

    def run(self) -> float:
        """Seconds (process CPU time) of the timed part of the trace on a fresh pool.

        Pool creation, op decoding and the warm-up ops are not timed; the garbage
        collector is off while timing (as in ``timeit``).
        """
        trace = self.trace
        warmup = int(trace["warmup"][0])
        total = len(trace["op"])
        pool = self.make_pool()
        requests = make_requests(trace)
        slots: list[Any] = [None] * len(trace["slot_hash_len"])
        replay(pool, build_ops(trace, pool, 0, warmup, requests), slots)
        ops = build_ops(trace, pool, warmup, total, requests)
        gc.collect()
        gc.disable()
        try:
            t0 = time.process_time()
            replay(pool, ops, slots)
            elapsed = time.process_time() - t0
        finally:
            gc.enable()
        fp = fingerprint(pool)
        if self.fingerprint is not None and fp != self.fingerprint:
            raise RuntimeError("two runs of the same trace ended in different states")
        self.fingerprint = fp
        return elapsed


def make_kvcore_pool() -> Any:
    from kvcore.block_pool import BlockPool

    return BlockPool(NUM_BLOCKS, enable_caching=True)


def make_vllm_pool() -> Any:
    from vllm.v1.core.block_pool import BlockPool

    return BlockPool(NUM_BLOCKS, enable_caching=True, hash_block_size=BLOCK_SIZE)


class NullPool:
    """Does no pool work: times the replay loop itself (the harness), for reference."""

    def __init__(self) -> None:
        from kvcore.kv_cache_block import KVCacheBlock

        self.blocks = [KVCacheBlock(i) for i in range(NUM_BLOCKS)]
        self._spare = self.blocks[1:5]
        self.free_block_queue = None

    def get_new_blocks(self, n: int) -> list[Any]:
        return self._spare[:n]

    def cache_full_blocks(self, *args: Any) -> None:
        return None

    def free_blocks(self, blocks: Any) -> None:
        return None

    def get_cached_block(self, block_hash: bytes, group_ids: list[int]) -> None:
        return None

    def touch(self, blocks: Any) -> None:
        return None


def vllm_importable() -> bool:
    try:
        import vllm.v1.core.block_pool  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=400_000, help="timed ops (default 400000)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=40_000,
        help="untimed ops that first fill the pool (default 40000)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5, help="best of N (default 5)")
    parser.add_argument(
        "--min-ratio",
        type=float,
        default=2.0,
        help="fail unless kvcore/vLLM ops/s >= this (default 2.0)",
    )
    parser.add_argument("--no-vllm", action="store_true", help="skip the vLLM comparison")
    parser.add_argument(
        "--gate",
        choices=("pool", "replay"),
        default="pool",
        help="which ratio --min-ratio applies to: 'pool' (replay time minus the same "
        "replay on a no-op pool, i.e. the pools' own work) or 'replay' (whole replay)",
    )
    parser.add_argument(
        "--vllm-python",
        type=Path,
        default=VLLM_PYTHON,
        help=f"interpreter with vLLM 0.33.0 (default {VLLM_PYTHON})",
    )
    args = parser.parse_args(argv)

    sys.path.insert(0, str(REPO))
    t0 = time.perf_counter()
    trace = generate_trace(args.ops, args.warmup, args.seed)
    timed = trace["op"][args.warmup :]
    mix = {OP_NAMES[k]: f"{np.mean(timed == k):.1%}" for k in range(5)}
    print(
        f"trace: {args.ops} timed ops (+{args.warmup} warm-up), seed {args.seed}, "
        f"{NUM_BLOCKS} blocks, usage at end {trace['final_usage'][0]:.1%}, "
        f"generated in {time.perf_counter() - t0:.1f}s"
    )
    print(f"mix:   {mix}")
    ours = Runner(make_kvcore_pool, trace)
    num_ops = args.ops
    if args.no_vllm:
        best = min(ours.run() for _ in range(args.repeats))
        print(
            f"kvcore BlockPool: {num_ops / best:>12,.0f} ops/s  "
            f"(best of {args.repeats}: {best:.3f}s CPU)"
        )
        return 0
    if not vllm_importable():
        # vLLM lives in its own venv: rerun this script there (kvcore needs only numpy,
        # cbor2 and xxhash, which that venv has) so both pools share one process.
        if not args.vllm_python.exists():
            print(
                f"vLLM interpreter {args.vllm_python} not found; rerun with --no-vllm or "
                "--vllm-python",
                file=sys.stderr,
            )
            return 2
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        cmd = [str(args.vllm_python), str(Path(__file__).resolve()), *(argv or sys.argv[1:])]
        return subprocess.call(cmd, env=env)
    theirs = Runner(make_vllm_pool, trace)
    harness = Runner(NullPool, trace)
    # Interleaved in one process, so that load from other processes hits all alike.
    times = [(ours.run(), theirs.run(), harness.run()) for _ in range(args.repeats)]
    best_ours = min(t[0] for t in times)
    best_theirs = min(t[1] for t in times)
    best_harness = min(t[2] for t in times)
    ratio = best_theirs / best_ours
    pool_ratio = (best_theirs - best_harness) / (best_ours - best_harness)
    print(
        f"kvcore BlockPool: {num_ops / best_ours:>12,.0f} ops/s  "
        f"(best of {args.repeats}: {best_ours:.3f}s CPU)"
    )
    print(
        f"vLLM   BlockPool: {num_ops / best_theirs:>12,.0f} ops/s  "
        f"(best of {args.repeats}: {best_theirs:.3f}s CPU)"
    )
    print(
        f"replay loop alone (no-op pool): {best_harness:.3f}s CPU; pool time "
        f"kvcore {best_ours - best_harness:.3f}s, vLLM {best_theirs - best_harness:.3f}s"
    )
    print(f"ratio kvcore/vLLM, whole replay:  {ratio:.2f}x")
    print(f"ratio kvcore/vLLM, pool time:     {pool_ratio:.2f}x")
    if ours.fingerprint != theirs.fingerprint:
        print(
            f"STATE MISMATCH: kvcore {ours.fingerprint} vs vLLM {theirs.fingerprint}",
            file=sys.stderr,
        )
        return 2
    print("final states identical (free-queue order, cached blocks)")
    gated = pool_ratio if args.gate == "pool" else ratio
    if gated < args.min_ratio:
        print(
            f"FAIL: kvcore is {gated:.2f}x vLLM's BlockPool rate ({args.gate} time), below "
            f"the required {args.min_ratio:.2f}x",
            file=sys.stderr,
        )
        return 1
    print(f"OK: {gated:.2f}x >= {args.min_ratio:.2f}x ({args.gate} time)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
