"""Chained block hashing for prefix caching.

Mirrors vLLM 0.33.0's ``vllm/utils/hashing.py`` (``sha256``, ``sha256_cbor``,
``xxhash``, ``xxhash_cbor``) and, from ``vllm/v1/core/kv_cache_utils.py``,
``init_none_hash``, ``hash_block_tokens``, ``generate_block_hash_extra_keys`` and
``get_request_block_hasher``.

A block's hash is ``hash_fn((parent_hash or NONE_HASH, tuple(tokens), extra_keys))``
where ``parent_hash`` is the previous block's hash, so equal hashes mean equal
prefixes. Unlike vLLM, ``NONE_HASH`` is not a process global: it is computed from a
seed string and carried by the :class:`BlockHasher` that uses it.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cbor2
import xxhash as _xxhash

from kvcore.kv_cache_block import UNKEYED, BlockHash

if TYPE_CHECKING:
    from kvcore.request import Request

HashFn = Callable[[Any], bytes]

DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
"""Seed of NONE_HASH that vLLM uses for sha256* when PYTHONHASHSEED is unset."""


def sha256(obj: Any) -> bytes:
    """SHA-256 of the highest-protocol pickle of ``obj`` (32 bytes)."""
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def sha256_cbor(obj: Any) -> bytes:
    """SHA-256 of the canonical CBOR encoding of ``obj`` (32 bytes)."""
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def xxhash(obj: Any) -> bytes:
    """xxh3-128 of the highest-protocol pickle of ``obj`` (16 bytes)."""
    return _xxhash.xxh3_128_digest(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def xxhash_cbor(obj: Any) -> bytes:
    """xxh3-128 of the canonical CBOR encoding of ``obj`` (16 bytes)."""
    return _xxhash.xxh3_128_digest(cbor2.dumps(obj, canonical=True))


HASH_FUNCTIONS: dict[str, HashFn] = {
    "sha256": sha256,
    "sha256_cbor": sha256_cbor,
    "xxhash": xxhash,
    "xxhash_cbor": xxhash_cbor,
}


def get_hash_fn_by_name(name: str) -> HashFn:
    """The hash function called ``name`` (vLLM's ``--prefix-caching-hash-algo``)."""
    try:
        return HASH_FUNCTIONS[name]
    except KeyError:
        allowed = ", ".join(HASH_FUNCTIONS)
        raise ValueError(
            f"prefix_caching_hash_algo: unknown hash algorithm {name!r}; allowed: {allowed}"
        ) from None


def make_none_hash(hash_fn: HashFn, seed: str = DEFAULT_NONE_HASH_SEED) -> bytes:
    """The parent hash of every first block: ``hash_fn(seed)`` (``init_none_hash``).

    vLLM uses ``PYTHONHASHSEED`` when set, else ``"vllm-none-hash"`` for sha256* and
    a random per-process seed for xxhash*; callers choose the seed explicitly here so
    runs are reproducible.
    """
    return hash_fn(seed)


def hash_block_tokens(
    hash_fn: HashFn,
    none_hash: BlockHash,
    parent_block_hash: BlockHash | None,
    token_ids: Any,
    extra_keys: tuple[Any, ...] | None = None,
) -> BlockHash:
    """Hash of one full block chained to its parent (``hash_block_tokens``)."""
    if not parent_block_hash:
        parent_block_hash = none_hash
    return hash_fn((parent_block_hash, tuple(token_ids), extra_keys))


def generate_block_hash_extra_keys(
    request: Request, start_token_idx: int, end_token_idx: int, start_mm_idx: int = 0
) -> tuple[tuple[Any, ...] | None, int]:
    """Extra hash keys of the block ``[start_token_idx, end_token_idx)``.

    Order as vLLM: LoRA ``("lora", name, path)``, multimodal
    ``("mm", identifier, item_offset - block_start)`` for each item overlapping the
    block, ``("cache_salt", salt)`` on the first block only. Returns ``(keys or None,
    index of the next multimodal item to consider)``.
    """
    keys: list[Any] = []
    lora = request.lora_request
    if lora is not None:
        keys.append(("lora", lora.lora_name, lora.lora_path))
    mm_idx = start_mm_idx
    mm_features = request.mm_features
    while mm_idx < len(mm_features):
        identifier, offset, length = mm_features[mm_idx]
        if end_token_idx <= offset:
            break  # the block ends before this item starts
        if start_token_idx >= offset + length:
            mm_idx += 1  # the item ended before this block
            continue
        keys.append(("mm", identifier, offset - start_token_idx))
        if end_token_idx >= offset + length:
            mm_idx += 1  # the item ends inside this block; the next may start here too
        else:
            break
    if start_token_idx == 0 and request.cache_salt:
        keys.append(("cache_salt", request.cache_salt))
    return (tuple(keys) if keys else None), mm_idx


class BlockHasher:
    """Per-request block hasher (mirrors ``get_request_block_hasher``).

    Called with a request, returns the hashes of the full blocks (of
    ``hash_block_size`` tokens over prompt + outputs) not hashed yet.

    ``num_lookahead_tokens`` (``L``, vLLM's ``num_hash_lookahead_tokens``; EAGLE with
    prefix caching): each hash also covers the ``L`` tokens after its block, so a
    block is hashed only once they exist; its extra keys become ``(keys, *tokens)``
    with ``keys`` those of the block and the ``L`` tokens.
    """

    __slots__ = ("hash_block_size", "hash_fn", "none_hash", "num_lookahead_tokens")

    def __init__(
        self,
        hash_block_size: int,
        hash_fn: Callable[[Any], Any],
        none_hash: BlockHash,
        num_lookahead_tokens: int = 0,
    ) -> None:
        if hash_block_size <= 0:
            raise ValueError(f"block_size must be > 0, got {hash_block_size}")
        if num_lookahead_tokens < 0:
            raise ValueError(f"num_lookahead_tokens must be >= 0, got {num_lookahead_tokens}")
        self.hash_block_size = hash_block_size
        self.hash_fn = hash_fn
        self.none_hash = none_hash
        self.num_lookahead_tokens = num_lookahead_tokens

    @classmethod
    def from_name(
        cls,
        hash_block_size: int,
        algo: str = "sha256",
        none_hash_seed: str = DEFAULT_NONE_HASH_SEED,
        num_lookahead_tokens: int = 0,
    ) -> BlockHasher:
        """A hasher for the named algorithm and NONE_HASH seed."""
        fn = get_hash_fn_by_name(algo)
        return cls(hash_block_size, fn, make_none_hash(fn, none_hash_seed), num_lookahead_tokens)

    def __call__(self, request: Request) -> list[Any]:
        bs = self.hash_block_size
        hashes = request.block_hashes
        start = len(hashes) * bs
        tokens = request.all_token_ids
        lookahead = self.num_lookahead_tokens
        num_tokens = len(tokens) - lookahead
        if start + bs > num_tokens:
            return []
        parent = hashes[-1] if hashes else self.none_hash
        plain = request.lora_request is None and not request.mm_features
        salt = request.cache_salt
        hash_fn = self.hash_fn
        out = []
        mm_idx = 0
        while start + bs <= num_tokens:
            end = start + bs
            if plain and not (salt and start == 0):
                if not lookahead:  # no extra keys at all: the usual block
                    parent = self.plain_hash(parent, tuple(tokens[start:end]))
                    out.append(parent)
                    start = end
                    continue
                extra: Any = None
            elif lookahead:
                extra, mm_idx = generate_block_hash_extra_keys(
                    request, start, end + lookahead, mm_idx
                )
                mm_idx = _rewind_mm_index(request, mm_idx, end)
            else:
                extra, mm_idx = generate_block_hash_extra_keys(request, start, end, mm_idx)
            if lookahead:
                extra = (extra, *tokens[end : end + lookahead])
            parent = hash_fn((parent, tuple(tokens[start:end]), extra))
            out.append(parent)
            start = end
        return out

    def plain_hash(self, parent: Any, block_tokens: tuple[int, ...]) -> Any:
        """The hash of a block without extra keys and lookahead after ``parent``'s:
        ``hash_fn((parent, block_tokens, None))``, as vLLM's ``hash_block_tokens``."""
        return self.hash_fn((parent, block_tokens, None))


def _rewind_mm_index(request: Request, mm_idx: int, block_end: int) -> int:
    """``generate_lookahead_block_hash_extra_keys``: step back to the first multimodal
    item that still overlaps the next block (the lookahead window may have passed it)."""
    mm_features = request.mm_features
    while mm_idx > 0:
        _, offset, length = mm_features[mm_idx - 1]
        if offset + length <= block_end:
            break
        mm_idx -= 1
    return mm_idx


def external_block_hash(block_hash: BlockHash) -> int:
    """A block hash as KV events publish it: its low 64 bits as an int
    (``maybe_convert_block_hash`` with ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``)."""
    if isinstance(block_hash, int):
        return block_hash & ((1 << 64) - 1)
    return int.from_bytes(block_hash, "big") & ((1 << 64) - 1)


class FastBlockHasher(BlockHasher):
    """A 64-bit chained block hasher for the simulator (not one of vLLM's algorithms).

    A :class:`BlockHasher` (same chaining, same extra keys) whose hash function is
    Python's ``hash((parent, block_tokens[, extra_id]))`` on ints, which is
    deterministic (``PYTHONHASHSEED`` only salts str/bytes, and extra keys are reduced
    to ints with SHA-256 first). The simulator writes no hash values anywhere, so which
    function hashes changes no result unless two different prefixes collide
    (probability about ``n**2 / 2**65`` for ``n`` distinct blocks), and it costs a
    fraction of ``sha256`` of a pickle.
    """

    __slots__ = ("_extra_ids", "for_unshared")

    def __init__(
        self, hash_block_size: int, num_lookahead_tokens: int = 0, unkeyed_unshared: bool = False
    ) -> None:
        """``unkeyed_unshared``: the engines let unshared requests' blocks go unkeyed
        until a preemption (see :class:`UnkeyedHasher`); :attr:`for_unshared` is then
        such a hasher, else this one."""
        super().__init__(
            hash_block_size,
            self._hash,
            int.from_bytes(sha256(DEFAULT_NONE_HASH_SEED)[:8], "big"),
            num_lookahead_tokens,
        )
        self._extra_ids: dict[Any, int] = {}
        self.for_unshared: BlockHasher | UnkeyedHasher = (
            UnkeyedHasher(hash_block_size, num_lookahead_tokens) if unkeyed_unshared else self
        )
        """The hasher of an unshared request's blocks (``Request.unshared``)."""

    def plain_hash(self, parent: Any, block_tokens: tuple[int, ...]) -> Any:
        """``hash((parent, block_tokens))``: what :meth:`_hash` gives a block without
        extra keys, without the call through ``hash_fn`` and the tuple it takes apart."""
        return hash((parent, block_tokens))

    def _hash(self, obj: tuple[Any, tuple[int, ...], Any]) -> int:
        parent, tokens, extra = obj
        if extra is None:
            return self.plain_hash(parent, tokens)
        if self.num_lookahead_tokens:  # (keys, *next tokens): the tokens as ints
            keys = extra[0]
            next_tokens = tuple(extra[1:])
            if keys is None:
                return hash((parent, tokens, next_tokens))
            return hash((parent, tokens, next_tokens, self._extra_id(keys)))
        return hash((parent, tokens, self._extra_id(extra)))

    def _extra_id(self, extra: Any) -> int:
        ident = self._extra_ids.get(extra)
        if ident is None:
            ident = self._extra_ids[extra] = int.from_bytes(sha256(extra)[:8], "big")
        return ident


class UnkeyedHasher:
    """The hasher of an unshared request's blocks where the engine lets them go
    unkeyed (a kvsim shortcut): the blocks a :class:`BlockHasher` of the same block
    size and lookahead would hash, each as :data:`kvcore.kv_cache_block.UNKEYED`.

    An unshared request shares no block's content with another request, so its hashes
    serve only its own lookup after a preemption; the block pool gives its blocks keys
    of their own then (:meth:`kvcore.block_pool.BlockPool.list_blocks`), and hashing
    their content (or sending the hashes from where prompts are drawn) is saved."""

    __slots__ = ("hash_block_size", "num_lookahead_tokens")

    def __init__(self, hash_block_size: int, num_lookahead_tokens: int = 0) -> None:
        self.hash_block_size = hash_block_size
        self.num_lookahead_tokens = num_lookahead_tokens

    def __call__(self, request: Request) -> list[Any]:
        return self.hashes(len(request.all_token_ids), len(request.block_hashes))

    def hashes(self, num_tokens: int, num_hashed: int = 0) -> list[Any]:
        """The hashes of ``num_tokens`` tokens' blocks after the first ``num_hashed``."""
        full = (num_tokens - self.num_lookahead_tokens) // self.hash_block_size
        return [UNKEYED] * (full - num_hashed)
