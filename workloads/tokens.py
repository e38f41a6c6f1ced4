"""Deterministic token ids, generated when a request arrives.

Every stream of random draws is a ``numpy.random.Generator`` keyed by the workload
seed, a tag naming what it is for, and the ids it belongs to (a session index, a
prefix group, a hash block). Equal keys give equal draws, whatever happened before,
so shared prefixes and equal Mooncake hash ids give equal token ids without keeping
them in memory.

Streams are PCG64 generators whose 128-bit state and increment are a BLAKE2b digest
of the key. Building a numpy generator costs several times more than setting a
generator's state, so per-request streams (:class:`KeyedStreams`) share one generator
and switch its state instead.
"""

from __future__ import annotations

import struct
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from hashlib import blake2b
from typing import Any

import numpy as np

TAG_ARRIVALS = 1
TAG_SESSION = 2
TAG_PREFIX = 3
TAG_HASH_BLOCK = 4
TAG_TRACE_ROW = 5
TAG_POOL = 6
TAG_POOL_ORDER = 7

DEFAULT_VOCAB_SIZE = 32000
"""Token ids are drawn from [0, vocab_size); 32000 is Llama-2's vocabulary."""


def _pcg_state(seed: int, tag: int, keys: tuple[int, ...]) -> dict[str, Any]:
    """The PCG64 state of stream ``(seed, tag, *keys)``."""
    text = ",".join(map(str, (seed, tag, *keys))).encode()
    digest = blake2b(text, digest_size=32, person=b"kvsim-stream").digest()
    return {
        "bit_generator": "PCG64",
        "state": {
            "state": int.from_bytes(digest[:16], "little"),
            "inc": int.from_bytes(digest[16:], "little") | 1,
        },
        "has_uint32": 0,
        "uinteger": 0,
    }


def stream(seed: int, tag: int, *keys: int) -> np.random.Generator:
    """A new generator for ``(seed, tag, *keys)``; all keys are non-negative integers."""
    bit_generator = np.random.PCG64()
    bit_generator.state = _pcg_state(seed, tag, keys)
    return np.random.Generator(bit_generator)


class KeyedStreams:
    """Keyed streams on one shared generator: :meth:`load` returns the generator
    positioned at the start of stream ``(seed, tag, *keys)`` (the same draws as
    :func:`stream`), valid until the next :meth:`load` or :meth:`restore`;
    :meth:`save` / :meth:`restore` park a stream to continue it later."""

    __slots__ = ("_bit_generator", "generator")

    def __init__(self) -> None:
        self._bit_generator = np.random.PCG64()
        self.generator = np.random.Generator(self._bit_generator)

    def load(self, seed: int, tag: int, *keys: int) -> np.random.Generator:
        self._bit_generator.state = _pcg_state(seed, tag, keys)
        return self.generator

    def save(self) -> dict[str, Any]:
        """Where the current stream is (to :meth:`restore` later)."""
        return self._bit_generator.state

    def restore(self, state: dict[str, Any]) -> np.random.Generator:
        self._bit_generator.state = state
        return self.generator


def token_typecode(vocab_size: int, explicit: bool = False) -> str:
    """The ``array`` type that carries prompt token ids below ``vocab_size`` from a
    helper process: the narrowest that holds them (2 bytes a token, else 4: a
    Llama-3's 128,256 ids in half the bytes of 8, so the pipe holds more prompts
    ahead); 8-byte signed for ``explicit`` ids (a trace's own, any int)."""
    if explicit:
        return "q"
    if vocab_size <= 1 << 16:
        return "H"
    return "I" if vocab_size <= 1 << 32 and array("I").itemsize >= 4 else "q"


def token_array(typecode: str, ids: Sequence[int]) -> array:
    """``array(typecode, ids)`` (a :func:`token_typecode`), packed in C by ``struct``,
    whose native sizes are the array's: 9 against 15 us for a 512-token prompt (timeit
    over 1,000 different prompts)."""
    out = array(typecode)
    out.frombytes(struct.pack(f"{len(ids)}{typecode}", *ids))
    return out


def random_tokens(rng: np.random.Generator, n: int, vocab_size: int) -> list[int]:
    """``n`` token ids drawn uniformly from ``[0, vocab_size)`` (64 raw bits each,
    reduced modulo the vocabulary: a bias below ``vocab_size / 2**64``)."""
    if n <= 0:
        return []
    return (rng.bit_generator.random_raw(n) % np.uint64(vocab_size)).tolist()


def prefix_tokens(seed: int, group: int, n: int, vocab_size: int) -> list[int]:
    """The ``n`` token ids of shared-prefix group ``group`` (equal for equal arguments)."""
    return random_tokens(stream(seed, TAG_PREFIX, group), n, vocab_size)


class HashBlockTokens:
    """Token ids for Mooncake-style hash ids: block ``h`` is ``block_size`` ids drawn
    from the stream ``(seed, TAG_HASH_BLOCK, h)``.

    A small LRU cache keeps recently used blocks (``max_blocks`` of them), so popular
    blocks are not redrawn on every request.
    """

    def __init__(self, seed: int, vocab_size: int, max_blocks: int = 4096) -> None:
        self._seed = seed
        self._vocab = vocab_size
        self._max = max_blocks
        self._cache: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self._streams = KeyedStreams()  # its own: callers may hold another stream

    def block(self, hash_id: int, block_size: int) -> np.ndarray:
        """The ``block_size`` token ids of hash block ``hash_id``."""
        key = (hash_id, block_size)
        tokens = self._cache.get(key)
        if tokens is not None:
            self._cache.move_to_end(key)
            return tokens
        rng = self._streams.load(self._seed, TAG_HASH_BLOCK, hash_id)
        tokens = rng.integers(0, self._vocab, block_size)
        self._cache[key] = tokens
        if len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return tokens

    def expand(self, hash_ids: list[int], block_size: int, num_tokens: int) -> list[int]:
        """Token ids of ``num_tokens`` tokens covered by ``hash_ids`` (last block cut short)."""
        blocks = [self.block(h, block_size) for h in hash_ids]
        return np.concatenate(blocks)[:num_tokens].tolist()
