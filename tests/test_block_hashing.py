"""Chained block hashes: golden values from vLLM 0.33.0 and the extra keys."""

import json

import pytest

from kvcore.block_hashing import (
    HASH_FUNCTIONS,
    BlockHasher,
    external_block_hash,
    generate_block_hash_extra_keys,
    get_hash_fn_by_name,
    hash_block_tokens,
    make_none_hash,
    sha256,
)
from kvcore.request import LoRARequest, Request


def test_none_hash_matches_vllm_sample(data_dir):
    header = json.loads((data_dir / "steps_shared_prefix.jsonl").open().readline())
    assert make_none_hash(sha256, header["none_hash_seed"]).hex() == header["none_hash"]


def test_block_hashes_match_vllm_ops_sample(data_dir):
    ops = json.loads((data_dir / "ops_example.json").read_text())
    prompt = ops[0]["prompt_token_ids"]
    expected = [json.loads(line) for line in (data_dir / "ops_example.jsonl").open()]
    expected = next(e for e in expected if e.get("op") == "block_hashes")["block_hashes"]
    req = Request("a", prompt, 4, block_hasher=BlockHasher.from_name(16, "sha256"))
    assert [h.hex() for h in req.block_hashes] == expected


def test_chain_depends_on_parent_and_only_full_blocks_hashed():
    hasher = BlockHasher.from_name(4, "sha256")
    a = Request("a", [1, 2, 3, 4, 5, 6, 7, 8, 9], 5, block_hasher=hasher)
    b = Request("b", [0, 2, 3, 4, 5, 6, 7, 8], 5, block_hasher=hasher)
    assert len(a.block_hashes) == 2  # 9 tokens: the partial third block has no hash
    assert a.block_hashes[1] != b.block_hashes[1]  # same tokens, different parent
    direct = hash_block_tokens(sha256, hasher.none_hash, a.block_hashes[0], [5, 6, 7, 8])
    assert direct == a.block_hashes[1]


def test_hashes_grow_as_outputs_are_appended():
    req = Request("a", [1, 2, 3], 10, block_hasher=BlockHasher.from_name(4, "sha256"))
    assert req.block_hashes == []
    req.append_output_token_ids(9)
    assert len(req.block_hashes) == 1
    req.append_output_token_ids([9, 9, 9, 9])
    assert len(req.block_hashes) == 2


@pytest.mark.parametrize("given", [0, 1, 2])
def test_hashes_computed_ahead_continue_like_hashing_from_scratch(given):
    hasher = BlockHasher.from_name(4, "sha256")
    prompt = [5, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    whole = Request("a", prompt, 10, block_hasher=hasher)
    ahead = Request("a", prompt, 10, block_hasher=hasher, block_hashes=whole.block_hashes[:given])
    assert ahead.block_hashes == whole.block_hashes
    for req in (whole, ahead):
        req.append_output_token_ids([7, 7, 7])
    assert len(ahead.block_hashes) == 3 and ahead.block_hashes == whole.block_hashes


@pytest.mark.parametrize("algo", sorted(HASH_FUNCTIONS))
def test_every_algorithm_is_deterministic_and_distinct(algo):
    h1 = BlockHasher.from_name(2, algo)
    h2 = BlockHasher.from_name(2, algo)
    r1 = Request("a", [1, 2, 3, 4], 1, block_hasher=h1)
    r2 = Request("b", [1, 2, 3, 4], 1, block_hasher=h2)
    assert r1.block_hashes == r2.block_hashes
    assert len(r1.block_hashes[0]) == (32 if algo.startswith("sha256") else 16)
    other = BlockHasher.from_name(2, algo, none_hash_seed="other")
    assert Request("c", [1, 2, 3, 4], 1, block_hasher=other).block_hashes != r1.block_hashes


def test_unknown_algorithm_names_the_field():
    with pytest.raises(ValueError, match="prefix_caching_hash_algo.*sha256"):
        get_hash_fn_by_name("md5")


def test_extra_keys_order_and_cache_salt_on_first_block_only():
    lora = LoRARequest("ad", 1, "/p")
    req = Request(
        "a", list(range(12)), 1, lora_request=lora, cache_salt="s", mm_features=[("img", 2, 5)]
    )
    keys0, idx = generate_block_hash_extra_keys(req, 0, 4, 0)
    assert keys0 == (("lora", "ad", "/p"), ("mm", "img", 2), ("cache_salt", "s"))
    keys1, idx = generate_block_hash_extra_keys(req, 4, 8, idx)
    assert keys1 == (("lora", "ad", "/p"), ("mm", "img", -2))
    keys2, _ = generate_block_hash_extra_keys(req, 8, 12, idx)
    assert keys2 == (("lora", "ad", "/p"),)
    plain = Request("b", list(range(8)), 1)
    assert generate_block_hash_extra_keys(plain, 0, 4, 0)[0] is None


def test_salt_and_lora_change_hashes():
    hasher = BlockHasher.from_name(4, "sha256")
    base = Request("a", list(range(8)), 1, block_hasher=hasher).block_hashes
    salted = Request("b", list(range(8)), 1, cache_salt="x", block_hasher=hasher).block_hashes
    lora = Request(
        "c", list(range(8)), 1, lora_request=LoRARequest.from_id(3), block_hasher=hasher
    ).block_hashes
    assert salted[0] != base[0] and salted[1] != base[1]  # the chain carries the salt on
    assert lora[0] != base[0] and lora[1] != salted[1]


def test_external_block_hash_is_low_64_bits():
    h = bytes(range(32))
    assert external_block_hash(h) == int.from_bytes(h[-8:], "big")


def test_fast_hasher_matches_the_prefix_structure_of_sha256():
    """FastBlockHasher (the simulator's) gives equal hashes exactly where vLLM's sha256
    hasher does: over shared prefixes, salts, LoRA adapters, multimodal items and
    appended outputs, on many random requests; hashes are plain ints, stable across
    processes (no str hashing)."""
    import random

    from kvcore.block_hashing import FastBlockHasher

    rng = random.Random(7)
    fast, ref = FastBlockHasher(4), BlockHasher.from_name(4, "sha256")
    base = [rng.randrange(50) for _ in range(40)]
    pairs = {}
    for i in range(300):
        n = rng.randrange(1, 40)
        tokens = base[:n] + [rng.randrange(3) for _ in range(rng.randrange(0, 12))]
        kwargs = {}
        if rng.random() < 0.3:
            kwargs["cache_salt"] = rng.choice(["a", "b"])
        if rng.random() < 0.3:
            kwargs["lora_request"] = LoRARequest.from_id(rng.choice([1, 2]))
        if rng.random() < 0.2:
            kwargs["mm_features"] = [(rng.choice(["img0", "img1"]), 2, 5)]
        reqs = [Request(f"r{i}{h}", tokens, 10, block_hasher=h, **kwargs) for h in (fast, ref)]
        outputs = [rng.randrange(3) for _ in range(rng.randrange(0, 9))]
        for r in reqs:
            r.append_output_token_ids(outputs)
        assert len(reqs[0].block_hashes) == len(reqs[1].block_hashes)
        assert all(isinstance(h, int) for h in reqs[0].block_hashes)
        for f, s in zip(reqs[0].block_hashes, reqs[1].block_hashes):
            assert pairs.setdefault(f, s) == s  # one sha256 hash per fast hash
    assert len(set(pairs.values())) == len(pairs)  # and one fast hash per sha256 hash
    assert len(pairs) > 200


def test_fast_hasher_loop_gives_the_general_paths_hashes():
    """FastBlockHasher's hashes of blocks without extra keys (BlockHasher's plain_hash)
    are hash((parent, block)) chained, bit for bit (also when hashing resumes after
    given hashes, and on appended outputs), and requests with extra keys or a lookahead
    hash as the general path does."""
    import random

    from kvcore.block_hashing import FastBlockHasher

    rng = random.Random(11)
    fast = FastBlockHasher(4)
    for i in range(200):
        tokens = [rng.randrange(32000) for _ in range(rng.randrange(1, 60))]
        kwargs = {}
        if rng.random() < 0.25:
            kwargs["cache_salt"] = "s"
        if rng.random() < 0.25:
            kwargs["lora_request"] = LoRARequest.from_id(1)
        req = Request(f"r{i}", tokens, 10, **kwargs)  # no hasher: nothing hashed yet
        general = BlockHasher.__call__(fast, req)
        assert fast(req) == general
        chained, parent = [], fast.none_hash
        if not kwargs:  # the loop's formula, written out
            for start in range(0, len(tokens) - 3, 4):
                parent = hash((parent, tuple(tokens[start : start + 4])))
                chained.append(parent)
            assert general == chained
        hashed = Request(f"h{i}", tokens, 10, block_hasher=fast, **kwargs)
        more = [rng.randrange(3) for _ in range(rng.randrange(0, 13))]
        hashed.append_output_token_ids(more)
        ref = Request(f"g{i}", tokens + more, 10, **kwargs)
        assert hashed.block_hashes == BlockHasher.__call__(fast, ref)
    ahead = FastBlockHasher(4, num_lookahead_tokens=2)
    req = Request("la", list(range(20)), 10)
    assert ahead(req) == BlockHasher.__call__(ahead, req)
    assert len(ahead(req)) == 4  # a block is hashed once its 2 lookahead tokens exist
