"""Throughput of kvcore's BlockPool on a mixed operation trace, against vLLM's own.

A 10,000-block pool is held near 75% use while a pre-generated trace runs about
16% ``get_new_blocks`` (1-4 blocks), 16% ``cache_full_blocks``, 31% ``free_blocks``
(a request's tail, or the whole request, in reverse), 20% ``get_cached_block``
lookups and 16% ``touch`` of a cached block found by a lookup. The trace is drawn
once with a seeded ``numpy.random.Generator`` (kvcore's pool serves as the state
oracle while drawing, so every op is valid) and replayed, untimed setup aside, on
each implementation; best of ``--repeats`` runs, timed in process CPU time with the
garbage collector off, kvcore and vLLM runs interleaved so that load from other
processes hits both alike. vLLM 0.33.0 lives in another venv (``.venv-vllm``), so
its side runs in a persistent subprocess of that interpreter, reading the same
trace from a temporary ``.npz`` file. Both sides must end in the same state
(free-queue order, cached blocks), which cross-checks behaviour too.

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
import json
import subprocess
import sys
import tempfile
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


def vllm_worker(trace_path: str) -> None:
    """Subprocess entry (vLLM's interpreter): one timed run per ``run`` line on stdin.

    Prints ``READY`` once set up, then one ``BENCH_RESULT {json}`` line per run.
    """
    with np.load(trace_path) as data:
        trace = {k: data[k] for k in data.files}
    runner = Runner(make_vllm_pool, trace)
    print("READY", flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        elapsed = runner.run()
        print(
            "BENCH_RESULT " + json.dumps({"s": elapsed, "fingerprint": runner.fingerprint}),
            flush=True,
        )


class VLLMRunner:
    """vLLM's BlockPool timed in a persistent subprocess of ``python``."""

    def __init__(self, trace: dict[str, np.ndarray], python: Path, tmp: str) -> None:
        path = Path(tmp) / "trace.npz"
        np.savez(path, **trace)
        self.fingerprint: dict[str, int] | None = None
        self.proc = subprocess.Popen(
            [str(python), str(Path(__file__).resolve()), "--vllm-worker", str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp,
        )
        self._expect("READY")

    def _expect(self, prefix: str) -> str:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                err = self.proc.stderr.read()
                raise RuntimeError(
                    f"vLLM bench worker failed (exit {self.proc.wait()}):\n{err[-3000:]}"
                )
            if line.startswith(prefix):
                return line[len(prefix) :].strip()

    def run(self) -> float:
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        result = json.loads(self._expect("BENCH_RESULT "))
        self.fingerprint = result["fingerprint"]
        return result["s"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


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
        "--vllm-python",
        type=Path,
        default=VLLM_PYTHON,
        help=f"interpreter with vLLM 0.33.0 (default {VLLM_PYTHON})",
    )
    parser.add_argument("--vllm-worker", metavar="TRACE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.vllm_worker:
        vllm_worker(args.vllm_worker)
        return 0

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
    if not args.vllm_python.exists():
        print(
            f"vLLM interpreter {args.vllm_python} not found; rerun with --no-vllm or --vllm-python",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        try:
            theirs = VLLMRunner(trace, args.vllm_python, tmp)
            try:
                # Interleaved, so that load from other processes hits both alike.
                times = [(ours.run(), theirs.run()) for _ in range(args.repeats)]
            finally:
                theirs.close()
        except RuntimeError as e:
            print(e, file=sys.stderr)
            return 2
    best_ours = min(t[0] for t in times)
    best_theirs = min(t[1] for t in times)
    ratio = best_theirs / best_ours
    print(
        f"kvcore BlockPool: {num_ops / best_ours:>12,.0f} ops/s  "
        f"(best of {args.repeats}: {best_ours:.3f}s CPU)"
    )
    print(
        f"vLLM   BlockPool: {num_ops / best_theirs:>12,.0f} ops/s  "
        f"(best of {args.repeats}: {best_theirs:.3f}s CPU)"
    )
    print(f"ratio kvcore/vLLM: {ratio:.2f}x (required >= {args.min_ratio:.2f}x)")
    if ours.fingerprint != theirs.fingerprint:
        print(
            f"STATE MISMATCH: kvcore {ours.fingerprint} vs vLLM {theirs.fingerprint}",
            file=sys.stderr,
        )
        return 2
    print("final states identical (free-queue order, cached blocks)")
    if ratio < args.min_ratio:
        print(
            f"FAIL: kvcore is {ratio:.2f}x vLLM's BlockPool rate, below the required "
            f"{args.min_ratio:.2f}x",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
