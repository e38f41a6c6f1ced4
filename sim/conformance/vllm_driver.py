"""Oracle driver: run vLLM 0.33.0's real scheduler and KV-cache core on a CPU.

This script is executed by the interpreter of the oracle virtual environment
(``.venv-vllm/bin/python``); kvsim never imports it. It uses only the standard
library and vLLM. It writes JSON lines that ``kvsim replay`` also writes, so the
two can be diffed line by line.

Modes
-----
``steps TRACE --config CFG [--out FILE]``
    Replay a step-indexed trace through ``vllm.v1.core.sched.scheduler.Scheduler``
    with a fake model that samples ``sample_token_id`` for every request whose
    prefill completed in the step. Output: a header line, one ``step`` line per
    scheduler step, and a summary line.
    With ``async_scheduling`` true it builds vLLM's ``AsyncScheduler`` instead and
    runs vLLM's own ``EngineCore.step_with_batch_queue`` (on an engine shell holding
    only the scheduler and a fake executor; batch queue size from
    ``VllmConfig.max_concurrent_batches``): the fake executor decides at execution
    (right after ``schedule()``) which requests sample, and the output is applied
    when the engine core pops that batch. One ``step`` line per engine iteration,
    with ``applied_step``, ``new_tokens``, ``in_flight`` and per-request
    ``placeholders`` added (the schema of ``kvcore.replay``).
``ops OPS --config CFG [--out FILE]``
    Drive ``KVCacheManager`` op by op (add, get_computed_blocks, allocate_slots,
    block_hashes, append_tokens, free, reset_prefix_cache, get_block_ids,
    new_step). One ``op`` line per op, after a header; a summary at the end.
``sizing CFG [--out FILE]``
    Print vLLM's own KV-cache sizing (number of blocks, groups, tensors) for a
    layer list and an amount of memory per worker.
``batch JOBS``
    Run many jobs (``[{"mode", "trace"|"ops"|"sizing", "config", "out"}]``, or
    ``{"mode": "cudagraph", "cases", "out"}``: vLLM's CUDA graph capture sizes per case,
    ``cudagraph_driver.py``) in one process so that vLLM is imported only once.

Request set-up (kvsim must mirror it)
-------------------------------------
* Requests are sorted stably by ``arrival_step``; request ``i`` in that order gets
  ``arrival_time = arrival_step + i * 1e-9``; ``SamplingParams(max_tokens=...,
  ignore_eos=True)``.
* ``priority`` (int, default 0) is passed as the request's priority.
* ``cache_salt`` (str) is passed as the request's ``cache_salt``: vLLM adds the
  extra key ``("cache_salt", salt)`` to the first block's hash only.
* ``lora_id`` (int >= 1) becomes ``LoRARequest(lora_name=f"lora{lora_id}",
  lora_int_id=lora_id, lora_path=f"/lora/{lora_id}")``, so every block hash of
  the request gets the extra key ``("lora", f"lora{lora_id}", f"/lora/{lora_id}")``
  (in front of the cache-salt key on block 0). No ``LoRAConfig`` is built, so
  the scheduler's ``max_loras`` admission limit is not active.
* NONE_HASH: vLLM derives it as ``hash_fn(seed)`` where the seed is
  ``PYTHONHASHSEED`` if set, else ``"vllm-none-hash"`` for sha256/sha256_cbor and
  random bytes for xxhash/xxhash_cbor. To make every algorithm deterministic the
  driver sets ``PYTHONHASHSEED`` to ``none_hash_seed`` (config knob, default
  ``"vllm-none-hash"``) just while calling vLLM's ``init_none_hash``. kvsim
  reproduces it as ``NONE_HASH = hash_fn("vllm-none-hash")`` with the configured
  algorithm (e.g. ``xxh3_128(pickle.dumps(seed, HIGHEST_PROTOCOL))`` for xxhash);
  the header records both the seed and the resulting hash in hex.
* ``abort_step`` (int >= arrival_step): the request is aborted after the adds of that
  step, before its ``schedule()``: one abort call per request, in arrival order
  (``EngineCore.abort_requests`` with the async engine shell; the same
  ``Scheduler.finish_requests(ids, FINISHED_ABORTED)`` call in the synchronous
  replay). ``abort_in_step`` (int >= arrival_step, at most one request per step): the
  abort comes while that step runs: the synchronous replay aborts after
  ``schedule()``, before ``update_from_output`` (as ``EngineCore.step`` reads its
  aborts queue); the async one puts it in the engine shell's ``aborts_queue`` before
  calling ``step_with_batch_queue``, which reads it before applying an output; when
  that iteration applies none, the abort is made at the start of the next step (its
  copy in the input queue). A step line whose aborts ended requests lists them under
  ``aborted`` (those before ``schedule()`` first).
* Speculative decoding (``num_speculative_tokens`` > 0, ``speculative_method`` ngram
  | ngram_gpu | draft_model | eagle | eagle3): vLLM's ``SpeculativeConfig`` on the
  tiny model (draft_model: the model itself; eagle / eagle3: a one-layer head); the
  fake model drafts and accepts by the rules of ``kvcore/replay_spec.py`` (loaded by
  path: the same file kvcore's replay uses). A request that verifies drafts samples
  ``1 + accepted`` tokens; after a synchronous step that ran (and did not set
  ``skip_drafts``) its scheduled requests get their next drafts through
  ``update_draft_token_ids`` (vLLM's ``EngineCore.post_step``). Step lines then add
  per scheduled request ``spec`` and per step ``skip_drafts`` and ``spec_decoding``.

Steps config keys (defaults in brackets)
----------------------------------------
block_size [16], num_gpu_blocks (required), enable_prefix_caching [true],
prefix_caching_hash_algo [sha256], max_num_seqs [128], max_num_batched_tokens
[2048], max_num_scheduled_tokens [= max_num_batched_tokens],
enable_chunked_prefill [true], long_prefill_token_threshold [0], policy [fcfs],
watermark [0.0], scheduler_reserve_full_isl [true], max_model_len [null: max of
prompt + max_tokens], use_v2_model_runner [true], kv_groups [["full"]]
(``full`` | ``sliding_window`` | ``chunked_local``), sliding_window,
attention_chunk_size, sample_token_id [7], enable_kv_cache_events [false],
dump_block_tables [false], num_speculative_tokens [0], speculative_method [ngram],
none_hash_seed
[vllm-none-hash], async_scheduling [false]. The header's ``config`` echoes the keys
of vLLM's samples only (kv_groups and window sizes show up as ``coordinator`` /
``managers``).

Ops: ``add`` takes request_id, prompt_token_ids and optional max_tokens,
priority, cache_salt, lora_id, arrival_time; ``allocate_slots`` takes
num_new_tokens (int, or "rest" = num_tokens - num_computed - pending hit) and
optional num_lookahead_tokens / full_sequence_must_fit, uses the hit of the
request's last ``get_computed_blocks``, records prefix-cache stats on success
when a lookup preceded it, advances num_computed_tokens by hit + new tokens,
and reports ``new_block_ids: null`` when vLLM refuses the allocation.

Ops config keys: num_gpu_blocks, block_size [16], enable_caching [true],
hash_algo [sha256], kv_groups, sliding_window, attention_chunk_size,
enable_kv_cache_events [false], max_model_len [8192], watermark [0.0],
none_hash_seed.

Sizing config keys: layers (list of {kind, count, num_kv_heads, head_size,
dtype, sliding_window, attention_chunk_size}; kind full | sliding_window |
chunked_local | mla; layers are numbered in list order), block_size [16],
available_bytes (one int, or a list with one value per worker), num_workers
[1], max_model_len [4096], hybrid_kv_cache_manager [true], kv_cache_layout
[LBNHC] (both forced as a GPU engine would resolve them).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import queue
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

import torch
import vllm
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVEventsConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
)
from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from vllm.lora.request import LoRARequest
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core import kv_cache_planning, kv_cache_utils
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
from vllm.v1.engine.core import EngineCoreProc
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

STEPS_DEFAULTS: dict[str, Any] = {
    "block_size": 16,
    "num_gpu_blocks": None,
    "enable_prefix_caching": True,
    "prefix_caching_hash_algo": "sha256",
    "max_num_seqs": 128,
    "max_num_batched_tokens": 2048,
    "max_num_scheduled_tokens": None,
    "enable_chunked_prefill": True,
    "long_prefill_token_threshold": 0,
    "policy": "fcfs",
    "watermark": 0.0,
    "scheduler_reserve_full_isl": True,
    "max_model_len": None,
    "use_v2_model_runner": True,
    "kv_groups": ["full"],
    "sliding_window": None,
    "attention_chunk_size": None,
    "sample_token_id": 7,
    "enable_kv_cache_events": False,
    "dump_block_tables": False,
    "num_speculative_tokens": 0,
    "speculative_method": "ngram",
    "none_hash_seed": kv_cache_utils.DEFAULT_NONE_HASH_SEED,
    "async_scheduling": False,
}

OPS_DEFAULTS: dict[str, Any] = {
    "num_gpu_blocks": None,
    "block_size": 16,
    "enable_caching": True,
    "hash_algo": "sha256",
    "kv_groups": ["full"],
    "sliding_window": None,
    "attention_chunk_size": None,
    "enable_kv_cache_events": False,
    "max_model_len": 8192,
    "watermark": 0.0,
    "none_hash_seed": kv_cache_utils.DEFAULT_NONE_HASH_SEED,
}

# Accepted spellings of a KV group kind -> (canonical kind, name in ops headers).
GROUP_KINDS = {
    "full": ("full", "full"),
    "sliding_window": ("sliding_window", "sliding"),
    "sliding": ("sliding_window", "sliding"),
    "swa": ("sliding_window", "sliding"),
    "chunked_local": ("chunked_local", "chunked_local"),
    "chunked": ("chunked_local", "chunked_local"),
}

TIMING_KEYS = ("build_s", "wall_s", "sched_loop_s", "steps_per_s")

_TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 1 << 22,
    "torch_dtype": "float32",
}
_MODEL_DIR: str | None = None


def _load_by_path(*parts: str) -> Any:
    """A standard-library-only module of kvsim, loaded by its path relative to this
    file (the oracle's interpreter has no kvsim package)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), *parts)
    name = "kvsim_oracle_" + os.path.splitext(parts[-1])[0]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


replay_spec = _load_by_path(os.pardir, os.pardir, "kvcore", "replay_spec.py")
"""kvcore's fake drafter rules."""


# --------------------------------------------------------------------------- #
# Shared helpers
# --------------------------------------------------------------------------- #
def merged(defaults: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """Return the defaults overridden by the config; unknown keys are an error."""
    unknown = sorted(set(config) - set(defaults))
    if unknown:
        raise ValueError(f"unknown config keys: {unknown}")
    out = dict(defaults)
    out.update(config)
    return out


def model_dir() -> str:
    """Return a temporary directory holding a tiny Llama config.json (made once)."""
    global _MODEL_DIR
    if _MODEL_DIR is None:
        _MODEL_DIR = tempfile.mkdtemp(prefix="kvsim-oracle-model-")
        with open(os.path.join(_MODEL_DIR, "config.json"), "w") as f:
            json.dump(_TINY_LLAMA, f)
    return _MODEL_DIR


_DRAFT_DIRS: dict[str, str] = {}
_DRAFT_ARCHITECTURES = {"eagle": "LlamaForCausalLM", "eagle3": "LlamaForCausalLMEagle3"}


def draft_model_dir(method: str) -> str:
    """The draft model of a speculative ``method``: the tiny Llama itself, or a
    one-layer EAGLE / EAGLE-3 head on it (made once)."""
    if method not in _DRAFT_ARCHITECTURES:
        return model_dir()
    if method not in _DRAFT_DIRS:
        path = tempfile.mkdtemp(prefix=f"kvsim-oracle-{method}-")
        config = dict(_TINY_LLAMA, architectures=[_DRAFT_ARCHITECTURES[method]])
        config["num_hidden_layers"] = 1
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(config, f)
        _DRAFT_DIRS[method] = path
    return _DRAFT_DIRS[method]


def init_none_hash(algo: str, seed: str) -> tuple[Callable[[Any], bytes], bytes]:
    """Initialise vLLM's global NONE_HASH from a fixed seed; return (hash_fn, hash)."""
    hash_fn = get_hash_fn_by_name(algo)
    saved = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = seed
    try:
        kv_cache_utils.init_none_hash(hash_fn)
    finally:
        if saved is None:
            del os.environ["PYTHONHASHSEED"]
        else:
            os.environ["PYTHONHASHSEED"] = saved
    return hash_fn, bytes(kv_cache_utils.NONE_HASH)


def tiny_spec(kind: str, cfg: dict[str, Any]) -> Any:
    """A one-head, head-size-1 KV spec of the given kind (only block counts matter)."""
    common = {
        "block_size": cfg["block_size"],
        "num_kv_heads": 1,
        "head_size": 1,
        "dtype": torch.float32,
    }
    canonical = GROUP_KINDS[kind][0]
    if canonical == "sliding_window":
        return SlidingWindowSpec(**common, sliding_window=int(cfg["sliding_window"]))
    if canonical == "chunked_local":
        return ChunkedLocalAttentionSpec(
            **common, attention_chunk_size=int(cfg["attention_chunk_size"])
        )
    return FullAttentionSpec(**common)


def kv_cache_config_for(cfg: dict[str, Any]) -> KVCacheConfig:
    """Hand-made KVCacheConfig: one group per entry of kv_groups, one pool."""
    groups = [
        KVCacheGroupSpec([f"layer{i}"], tiny_spec(kind, cfg))
        for i, kind in enumerate(cfg["kv_groups"])
    ]
    return KVCacheConfig(
        num_blocks=int(cfg["num_gpu_blocks"]), kv_cache_tensors=[], kv_cache_groups=groups
    )


def event_to_json(event: Any) -> dict[str, Any]:
    """Serialise one vLLM KV-cache event to the samples' compact form."""
    if isinstance(event, BlockStored):
        return {
            "type": "BlockStored",
            "block_hashes": list(event.block_hashes),
            "parent_block_hash": event.parent_block_hash,
            "num_tokens": len(event.token_ids),
            "block_size": event.block_size,
            "group_idx": event.group_idx,
        }
    if isinstance(event, BlockRemoved):
        return {
            "type": "BlockRemoved",
            "block_hashes": list(event.block_hashes),
            "group_idx": event.group_idx,
        }
    if isinstance(event, AllBlocksCleared):
        return {"type": "AllBlocksCleared"}
    return {"type": type(event).__name__}


def lora_request_for(lora_id: int | None) -> LoRARequest | None:
    """The LoRARequest used for an integer lora_id (see module docstring)."""
    if lora_id is None:
        return None
    lid = int(lora_id)
    return LoRARequest(lora_name=f"lora{lid}", lora_int_id=lid, lora_path=f"/lora/{lid}")


def make_request(
    spec: dict[str, Any],
    arrival_time: float,
    block_hasher: Callable[[Request], list[Any]],
    max_tokens: int,
) -> Request:
    """Build a vLLM Request from a trace or op entry."""
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    return Request(
        request_id=str(spec["request_id"]),
        prompt_token_ids=list(spec["prompt_token_ids"]),
        sampling_params=params,
        pooling_params=None,
        arrival_time=arrival_time,
        lora_request=lora_request_for(spec.get("lora_id")),
        cache_salt=spec.get("cache_salt"),
        priority=int(spec.get("priority", 0)),
        block_hasher=block_hasher,
    )


def rounded(x: float) -> float:
    """Round a ratio to 6 decimals as the samples do."""
    return round(float(x), 6)


def load_json(value: Any) -> Any:
    """A JSON document given inline, or as a path to a file."""
    if isinstance(value, str):
        with open(value) as f:
            return json.load(f)
    return value


def source_name(value: Any) -> str:
    """File name recorded in headers for a trace given as path or inline."""
    return os.path.basename(value) if isinstance(value, str) else "<inline>"


# --------------------------------------------------------------------------- #
# steps mode
# --------------------------------------------------------------------------- #
class _EventSink:
    """Stands in for vLLM's event publisher and keeps the events of one step."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def publish(self, batch: Any) -> None:
        """Collect a KVEventBatch."""
        self.events.extend(batch.events)

    def take(self) -> list[Any]:
        """Return and clear the collected events."""
        out, self.events = self.events, []
        return out

    def shutdown(self) -> None:
        """Nothing to release."""


def resolve_max_model_len(cfg: dict[str, Any], trace: list[dict[str, Any]]) -> int:
    """max_model_len from the config, or the longest prompt + max_tokens."""
    if cfg["max_model_len"] is not None:
        return int(cfg["max_model_len"])
    return max(len(r["prompt_token_ids"]) + int(r["max_tokens"]) for r in trace)


def build_vllm_config(
    cfg: dict[str, Any], max_model_len: int, kv_transfer_config: Any = None
) -> VllmConfig:
    """VllmConfig for a CPU-only scheduler over a tiny offline model directory
    (``kv_transfer_config``: a KV connector, for ``pd_driver.py``)."""
    path = model_dir()
    model = ModelConfig(
        model=path,
        tokenizer=path,
        skip_tokenizer_init=True,
        dtype="float32",
        seed=0,
        max_model_len=max_model_len,
    )
    sched_kwargs: dict[str, Any] = {
        "max_num_seqs": int(cfg["max_num_seqs"]),
        "max_num_batched_tokens": int(cfg["max_num_batched_tokens"]),
        "max_model_len": max_model_len,
        "enable_chunked_prefill": bool(cfg["enable_chunked_prefill"]),
        "long_prefill_token_threshold": int(cfg["long_prefill_token_threshold"]),
        "policy": cfg["policy"],
        "watermark": float(cfg["watermark"]),
        "scheduler_reserve_full_isl": bool(cfg["scheduler_reserve_full_isl"]),
        "async_scheduling": bool(cfg["async_scheduling"]),
        "is_encoder_decoder": False,
    }
    if cfg["max_num_scheduled_tokens"] is not None:
        sched_kwargs["max_num_scheduled_tokens"] = int(cfg["max_num_scheduled_tokens"])
    cache = CacheConfig(
        block_size=int(cfg["block_size"]),
        enable_prefix_caching=bool(cfg["enable_prefix_caching"]),
        prefix_caching_hash_algo=cfg["prefix_caching_hash_algo"],
    )
    cache.num_gpu_blocks = int(cfg["num_gpu_blocks"])
    events = None
    if cfg["enable_kv_cache_events"]:
        events = KVEventsConfig(enable_kv_cache_events=True, publisher="null")
    speculative = None
    k = int(cfg["num_speculative_tokens"] or 0)
    if k:
        method = cfg["speculative_method"]
        speculative = SpeculativeConfig(
            method=method,
            num_speculative_tokens=k,
            model=None if method.startswith("ngram") else draft_model_dir(method),
            target_model_config=model,
            target_parallel_config=ParallelConfig(),
        )
    return VllmConfig(
        model_config=model,
        scheduler_config=SchedulerConfig(**sched_kwargs),
        cache_config=cache,
        device_config=DeviceConfig(device="cpu"),
        kv_events_config=events,
        speculative_config=speculative,
        kv_transfer_config=kv_transfer_config,
    )


def build_scheduler(cfg: dict[str, Any], max_model_len: int) -> tuple[Scheduler, _EventSink]:
    """Build vLLM's Scheduler from the knobs; returns it with its event sink."""
    vllm_config = build_vllm_config(cfg, max_model_len)
    register_all_kvcache_specs(vllm_config)
    cls = RecordingAsyncScheduler if cfg["async_scheduling"] else Scheduler
    if cfg["async_scheduling"] and vllm_config.scheduler_config.async_scheduling is not True:
        raise ValueError("vLLM turned async scheduling off for this configuration")
    sched = cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config_for(cfg),
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=int(cfg["block_size"]),
        log_stats=True,
    )
    sched.use_v2_model_runner = bool(cfg["use_v2_model_runner"])
    sink = _EventSink()
    sched.kv_event_publisher = sink
    return sched, sink


def header_config(sched: Scheduler, cfg: dict[str, Any], max_model_len: int) -> dict[str, Any]:
    """The header's config block, in the samples' key order."""
    sc = sched.scheduler_config
    coordinator = sched.kv_cache_manager.coordinator
    return {
        "block_size": int(cfg["block_size"]),
        "num_gpu_blocks": int(cfg["num_gpu_blocks"]),
        "enable_prefix_caching": bool(sched.cache_config.enable_prefix_caching),
        "prefix_caching_hash_algo": sched.cache_config.prefix_caching_hash_algo,
        "max_num_seqs": sc.max_num_seqs,
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "max_num_scheduled_tokens": sched.max_num_scheduled_tokens,
        "enable_chunked_prefill": sc.enable_chunked_prefill,
        "long_prefill_token_threshold": sc.long_prefill_token_threshold,
        "policy": str(sc.policy),
        "watermark": sc.watermark,
        "scheduler_reserve_full_isl": sched.scheduler_reserve_full_isl,
        "max_model_len": max_model_len,
        "use_v2_model_runner": bool(sched.use_v2_model_runner),
        "coordinator": type(coordinator).__name__,
        "managers": [type(m).__name__ for m in coordinator.single_type_managers],
    }


def ordered_trace(trace: list[dict[str, Any]]) -> list[tuple[float, dict[str, Any]]]:
    """Requests sorted stably by arrival step, each with its arrival time."""
    reqs = sorted(trace, key=lambda r: int(r["arrival_step"]))
    return [(int(r["arrival_step"]) + i * 1e-9, r) for i, r in enumerate(reqs)]


def sampled_tokens(sched: Scheduler, out: Any, token: int) -> list[list[int]]:
    """Right after ``schedule()``: `token` for each scheduled request whose prefill is
    now complete, ``1 + accepted`` times for one that verifies drafts."""
    spec = out.scheduled_spec_decode_tokens
    sampled = []
    for rid in out.num_scheduled_tokens:
        req = sched.requests[rid]
        if req.is_prefill_chunk:
            sampled.append([])
            continue
        drafts = spec.get(rid)
        n = 1 + replay_spec.num_accepted(rid, req.num_tokens, len(drafts)) if drafts else 1
        sampled.append([token] * n)
    return sampled


def propose_drafts(sched: Scheduler, out: Any, token: int) -> None:
    """After a synchronous step that ran: the fake drafter's proposals, handed over as
    ``EngineCore.post_step`` hands the model runner's."""
    k = sched.num_spec_tokens
    if not k or not out.total_num_scheduled_tokens or out.skip_drafts:
        return
    req_ids, drafts = [], []
    for rid in out.num_scheduled_tokens:
        req = sched.requests.get(rid)
        if req is not None and not req.is_finished():
            req_ids.append(rid)
            drafts.append([token] * replay_spec.num_drafts(rid, req.num_tokens, k))
    sched.update_draft_token_ids(DraftTokenIds(req_ids, drafts))


def spec_stats_json(engine_outputs: dict[int, Any]) -> dict[str, Any] | None:
    """The step's speculative-decoding counters (None: no drafts verified)."""
    stats = None
    for eco in engine_outputs.values():
        if eco.scheduler_stats is not None:
            stats = eco.scheduler_stats.spec_decoding_stats
    return replay_spec.spec_stats_json(stats)


def fake_model_output(sched: Scheduler, out: Any, token: int) -> ModelRunnerOutput:
    """The model output of a synchronous step (see :func:`sampled_tokens`)."""
    req_ids = list(out.num_scheduled_tokens)
    sampled = sampled_tokens(sched, out, token)
    return ModelRunnerOutput(
        req_ids=req_ids,
        req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
        sampled_token_ids=sampled,
    )


def new_blocks_by_request(out: Any) -> dict[str, list[list[int]]]:
    """Block ids that the scheduler output reports for each scheduled request."""
    blocks: dict[str, list[list[int]]] = {}
    for data in out.scheduled_new_reqs:
        blocks[data.req_id] = [list(g) for g in data.block_ids]
    cached = out.scheduled_cached_reqs
    for rid, ids in zip(cached.req_ids, cached.new_block_ids):
        blocks[rid] = [] if ids is None else [list(g) for g in ids]
    return blocks


def prefix_stats_json(engine_outputs: dict[int, Any]) -> dict[str, int]:
    """Per-step prefix-cache counters from the EngineCoreOutputs' scheduler stats."""
    keys = ("requests", "queries", "hits", "preempted_requests", "preempted_queries")
    keys += ("preempted_hits",)
    stats = None
    for eco in engine_outputs.values():
        if eco.scheduler_stats is not None:
            stats = eco.scheduler_stats.prefix_cache_stats
    return {k: int(getattr(stats, k, 0)) if stats else 0 for k in keys}


def finished_ids(engine_outputs: dict[int, Any]) -> list[str]:
    """Ids of requests that finished in this step, in output order."""
    return [
        o.request_id
        for eco in engine_outputs.values()
        for o in eco.outputs
        if o.finish_reason is not None
    ]


class StepReplay:
    """Replays one trace through a Scheduler and yields the JSON lines."""

    def __init__(self, trace: list[dict[str, Any]], cfg: dict[str, Any], name: str) -> None:
        self.trace = trace
        self.cfg = cfg
        self.name = name
        self.seen: set[str] = set()
        self.resuming: set[str] = set()
        self.in_step: list[str] = []  # aborts that come while the next step runs
        self.aborted: list[str] = []  # ids the aborts of the current step ended
        self.deferred: list[str] = []  # in-step aborts left to the next step

    def build(self) -> dict[str, Any]:
        """Build the scheduler and return the header line."""
        t0 = time.perf_counter()
        cfg = self.cfg
        self.max_model_len = resolve_max_model_len(cfg, self.trace)
        hash_fn, none_hash = init_none_hash(cfg["prefix_caching_hash_algo"], cfg["none_hash_seed"])
        self.sched, self.sink = build_scheduler(cfg, self.max_model_len)
        self.block_hasher = kv_cache_utils.get_request_block_hasher(
            int(cfg["block_size"]),
            hash_fn,
            num_hash_lookahead_tokens=self.sched.vllm_config.num_hash_lookahead_tokens,
        )
        return {
            "type": "header",
            "vllm_version": vllm.__version__,
            "trace": self.name,
            "num_requests": len(self.trace),
            "sample_token_id": int(cfg["sample_token_id"]),
            "build_s": round(time.perf_counter() - t0, 3),
            "config": header_config(self.sched, cfg, self.max_model_len),
            "none_hash_seed": cfg["none_hash_seed"],
            "none_hash": none_hash.hex(),
        }

    def has_work(self) -> bool:
        """Whether the loop goes on once every request has arrived."""
        return self.sched.has_requests()

    def abort(self, rid: str) -> bool:
        """Abort one request as the engine core does; whether it ended it."""
        req = self.sched.requests.get(rid)
        live = req is not None and not req.is_finished()
        self.sched.finish_requests([rid], RequestStatus.FINISHED_ABORTED)
        return live and rid not in self.sched.requests

    def scheduled_entry(self, rid: str, n: int, blocks: list[list[int]]) -> dict[str, Any]:
        """The per-request record of one step (before model output)."""
        if rid not in self.seen:
            kind = "new"
            self.seen.add(rid)
        elif rid in self.resuming:
            kind = "resumed"
            self.resuming.discard(rid)
        else:
            kind = "running"
        return {"id": rid, "kind": kind, "n": n, "new_block_ids": blocks}

    def finish_entry(self, entry: dict[str, Any], sampled: bool) -> None:
        """Add the post-output fields of a scheduled request (if it still exists)."""
        entry["sampled"] = sampled
        req = self.sched.requests.get(entry["id"])
        if req is None:
            return
        entry["computed_after"] = req.num_computed_tokens
        entry["num_tokens"] = req.num_tokens
        if self.cfg["dump_block_tables"]:
            ids = self.sched.kv_cache_manager.get_block_ids(entry["id"])
            entry["block_table"] = [list(g) for g in ids]

    def step(self, index: int) -> dict[str, Any]:
        """Run one schedule() / fake model / update_from_output() round."""
        sched = self.sched
        pool = sched.kv_cache_manager.block_pool
        out = sched.schedule()
        free_after_schedule = pool.get_num_free_blocks()
        blocks = new_blocks_by_request(out)
        entries = [
            self.scheduled_entry(rid, n, blocks.get(rid, []))
            for rid, n in out.num_scheduled_tokens.items()
        ]
        token = int(self.cfg["sample_token_id"])
        mro = fake_model_output(sched, out, token)
        self.aborted += [rid for rid in self.in_step if self.abort(rid)]
        engine_outputs = sched.update_from_output(out, mro)
        propose_drafts(sched, out, token)
        self.add_spec_counts(entries, out)
        for entry, tokens in zip(entries, mro.sampled_token_ids):
            self.finish_entry(entry, bool(tokens))
        preempted = sorted(out.preempted_req_ids or ())
        self.resuming.update(preempted)
        num_running, num_waiting = sched.get_request_counts()
        line: dict[str, Any] = {
            "type": "step",
            "step": index,
            "scheduled": entries,
            "total_scheduled_tokens": out.total_num_scheduled_tokens,
            "preempted": preempted,
            "finished": finished_ids(engine_outputs),
            "free_blocks_after_schedule": free_after_schedule,
            "free_blocks": pool.get_num_free_blocks(),
            "num_running": num_running,
            "num_waiting": num_waiting,
            "kv_cache_usage": rounded(sched.get_kv_cache_usage()),
            "prefix_cache": prefix_stats_json(engine_outputs),
        }
        if self.cfg["enable_kv_cache_events"]:
            line["kv_events"] = [event_to_json(e) for e in self.sink.take()]
        if self.cfg["num_speculative_tokens"]:
            line["skip_drafts"] = bool(out.skip_drafts)
            line["spec_decoding"] = spec_stats_json(engine_outputs)
        return line

    def add_spec_counts(self, entries: list[dict[str, Any]], out: Any) -> None:
        """With speculative decoding: each entry's drafts verified in this step."""
        if not self.cfg["num_speculative_tokens"]:
            return
        spec = out.scheduled_spec_decode_tokens
        for entry in entries:
            entry["spec"] = len(spec.get(entry["id"], ()))

    def run(self) -> Iterable[dict[str, Any]]:
        """Yield the header, every step line and the summary."""
        t_start = time.perf_counter()
        yield self.build()
        pending = ordered_trace(self.trace)
        aborts = sorted(
            (int(spec["abort_step"]), i, str(spec["request_id"]))
            for i, (_, spec) in enumerate(pending)
            if spec.get("abort_step") is not None
        )
        during = sorted(
            (int(spec["abort_in_step"]), i, str(spec["request_id"]))
            for i, (_, spec) in enumerate(pending)
            if spec.get("abort_in_step") is not None
        )
        next_abort = next_during = 0
        nxt, step, loop_s = 0, 0, 0.0
        totals = {"finished": 0, "preempted": 0, "tokens": 0}
        while True:
            while nxt < len(pending) and pending[nxt][1]["arrival_step"] <= step:
                arrival, spec = pending[nxt]
                req = make_request(spec, arrival, self.block_hasher, int(spec["max_tokens"]))
                self.sched.add_request(req)
                nxt += 1
            due, self.deferred = self.deferred, []
            while next_abort < len(aborts) and aborts[next_abort][0] <= step:
                due.append(aborts[next_abort][2])
                next_abort += 1
            self.aborted = [rid for rid in due if self.abort(rid)]
            self.in_step = []
            while next_during < len(during) and during[next_during][0] <= step:
                self.in_step.append(during[next_during][2])
                next_during += 1
            if nxt == len(pending) and not self.has_work():
                break
            t0 = time.perf_counter()
            line = self.step(step)
            loop_s += time.perf_counter() - t0
            if self.aborted:
                line["aborted"] = self.aborted
            totals["finished"] += len(line["finished"])
            totals["preempted"] += len(line["preempted"])
            totals["tokens"] += line["total_scheduled_tokens"]
            yield line
            step += 1
        yield {
            "type": "summary",
            "steps": step,
            "finished": totals["finished"],
            "num_requests": len(self.trace),
            "total_preemption_events": totals["preempted"],
            "total_scheduled_tokens": totals["tokens"],
            "free_blocks_end": self.sched.kv_cache_manager.block_pool.get_num_free_blocks(),
            "wall_s": round(time.perf_counter() - t_start, 3),
            "sched_loop_s": round(loop_s, 3),
            "steps_per_s": round(step / loop_s, 1) if loop_s > 0 else 0.0,
        }


class RecordingAsyncScheduler(AsyncScheduler):
    """vLLM's AsyncScheduler, noting which scheduler outputs it plans and applies."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.applied: list[Any] = []

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        """Record the batch whose output is applied, then apply it."""
        self.applied.append(scheduler_output)
        return super().update_from_output(scheduler_output, model_runner_output)


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class HeldOutputExecutor:
    """A fake model executor's hand-over of a batch's output: held from
    ``execute_model`` until ``sample_tokens`` (a batch without tokens returns its
    output at once, as vLLM's executor does)."""

    pending: ModelRunnerOutput | None = None

    def _hold(self, scheduler_output: Any, output: Any, empty: Any) -> Future:
        """``execute_model``'s future: ``empty`` for a batch without tokens, else None
        (``output`` waits for :meth:`sample_tokens`)."""
        if scheduler_output.total_num_scheduled_tokens == 0:
            return _done(empty)
        self.pending = output
        return _done(None)

    def sample_tokens(self, grammar_output: Any, non_block: bool = False) -> Future:
        """The output of the batch executed last."""
        output, self.pending = self.pending, None
        assert output is not None, "sample_tokens without execute_model"
        return _done(output)


class FakeExecutor(HeldOutputExecutor):
    """Stands in for the model executor: every batch executes at once.

    ``execute_model`` runs right after ``schedule()``; it decides which requests
    sample (those not in a partial prefill chunk) and records the batch;
    ``sample_tokens`` returns that batch's output."""

    def __init__(self, sched: Scheduler, token: int, free_blocks: Callable[[], int]) -> None:
        self.sched = sched
        self.token = token
        self.free_blocks = free_blocks
        self.executed: list[tuple[Any, ModelRunnerOutput, int]] = []

    def execute_model(self, scheduler_output: Any, non_block: bool = False) -> Future:
        """Fix the batch's sampled tokens; no output yet when any token was scheduled."""
        req_ids = list(scheduler_output.num_scheduled_tokens)
        sampled = sampled_tokens(self.sched, scheduler_output, self.token)
        output = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=sampled,
        )
        self.executed.append((scheduler_output, output, self.free_blocks()))
        return self._hold(scheduler_output, output, EMPTY_MODEL_RUNNER_OUTPUT)


class EngineShell(EngineCoreProc):
    """An engine-core process holding only what ``step_with_batch_queue`` and
    ``has_work`` read: the scheduler, a fake executor and the batch queue (no model,
    no processes, no I/O)."""

    def __init__(self, sched: Scheduler, executor: FakeExecutor) -> None:  # noqa: D107
        # EngineCoreProc.__init__ is not called: it would load a model and open sockets.
        self.vllm_config = sched.vllm_config
        self.scheduler = sched
        self.model_executor = executor
        self.log_stats = True
        self.batch_queue_size = sched.vllm_config.max_concurrent_batches
        assert self.batch_queue_size > 1, "no batch queue without async scheduling"
        self.batch_queue = deque(maxlen=self.batch_queue_size)
        self.is_mm_encoder_only = False
        self.is_pooling_model = False
        self.check_for_draft_tokens = False
        self.async_scheduling = True
        self.aborts_queue = queue.Queue()
        self.engines_running = False
        self._weight_version = None


class AsyncStepReplay(StepReplay):
    """Replays one trace through vLLM's AsyncScheduler and engine-core batch queue."""

    def build(self) -> dict[str, Any]:
        """Build the scheduler and the engine shell; return the header line."""
        header = super().build()
        pool = self.sched.kv_cache_manager.block_pool
        self.executor = FakeExecutor(
            self.sched, int(self.cfg["sample_token_id"]), pool.get_num_free_blocks
        )
        self.engine = EngineShell(self.sched, self.executor)
        self.batch_steps: dict[int, int] = {}  # id(scheduler output) -> engine step
        header["config"]["async_scheduling"] = True
        header["config"]["batch_queue_size"] = self.engine.batch_queue_size
        return header

    def has_work(self) -> bool:
        """vLLM's own EngineCore.has_work."""
        return self.engine.has_work()

    def abort(self, rid: str) -> bool:
        """vLLM's own EngineCore.abort_requests for one request; whether it ended it."""
        req = self.sched.requests.get(rid)
        live = req is not None and not req.is_finished()
        self.engine.abort_requests([rid])
        return live and rid not in self.sched.requests

    def step(self, index: int) -> dict[str, Any]:
        """One call of vLLM's EngineCore.step_with_batch_queue."""
        sched = self.sched
        pool = sched.kv_cache_manager.block_pool
        free_before = pool.get_num_free_blocks()
        live = {rid for rid in self.in_step if rid in sched.requests}
        for rid in self.in_step:  # one abort message per client, as the input thread queues
            self.engine.aborts_queue.put_nowait([rid])
        engine_outputs, _ = self.engine.step_with_batch_queue()
        if self.engine.aborts_queue.empty():  # read before an output was applied
            self.aborted += [
                rid for rid in self.in_step if rid in live and rid not in sched.requests
            ]
        else:  # no output applied: the input queue's copy aborts at the next step
            while not self.engine.aborts_queue.empty():
                self.engine.aborts_queue.get_nowait()
            self.deferred = list(self.in_step)
        entries: list[dict[str, Any]] = []
        preempted: list[str] = []
        total = 0
        free_after_schedule = free_before
        new_batches, self.executor.executed = self.executor.executed, []
        assert len(new_batches) <= 1, "more than one batch scheduled in one iteration"
        sampled_flags: list[bool] = []
        if new_batches:
            out, mro, free_after_schedule = new_batches[0]
            self.batch_steps[id(out)] = index
            blocks = new_blocks_by_request(out)
            entries = [
                self.scheduled_entry(rid, n, blocks.get(rid, []))
                for rid, n in out.num_scheduled_tokens.items()
            ]
            sampled_flags = [bool(t) for t in mro.sampled_token_ids]
            self.add_spec_counts(entries, out)
            preempted = sorted(out.preempted_req_ids or ())
            self.resuming.update(preempted)
            total = out.total_num_scheduled_tokens
        for entry, sampled in zip(entries, sampled_flags):
            self.finish_entry(entry, sampled)
            req = sched.requests.get(entry["id"])
            if req is not None:
                entry["placeholders"] = req.num_output_placeholders
        applied, sched.applied = sched.applied, []
        assert len(applied) <= 1, "more than one batch applied in one iteration"
        applied_step = self.batch_steps.pop(id(applied[0])) if applied else None
        outputs = engine_outputs or {}
        num_running, num_waiting = sched.get_request_counts()
        line: dict[str, Any] = {
            "type": "step",
            "step": index,
            "scheduled": entries,
            "total_scheduled_tokens": total,
            "preempted": preempted,
            "applied_step": applied_step,
            "new_tokens": [
                o.request_id for eco in outputs.values() for o in eco.outputs if o.new_token_ids
            ],
            "finished": finished_ids(outputs),
            "in_flight": [self.batch_steps[id(b[1])] for b in reversed(self.engine.batch_queue)],
            "free_blocks_after_schedule": free_after_schedule,
            "free_blocks": pool.get_num_free_blocks(),
            "num_running": num_running,
            "num_waiting": num_waiting,
            "kv_cache_usage": rounded(sched.get_kv_cache_usage()),
            "prefix_cache": prefix_stats_json(outputs) if applied else None,
        }
        if self.cfg["enable_kv_cache_events"]:
            line["kv_events"] = [event_to_json(e) for e in self.sink.take()]
        if self.cfg["num_speculative_tokens"]:
            line["skip_drafts"] = bool(new_batches[0][0].skip_drafts) if new_batches else None
            line["spec_decoding"] = spec_stats_json(outputs) if applied else None
        return line


def run_steps(trace: Any, config: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """Replay a trace (path or list) with the given knobs."""
    cfg = merged(STEPS_DEFAULTS, config)
    cls = AsyncStepReplay if cfg["async_scheduling"] else StepReplay
    return cls(load_json(trace), cfg, source_name(trace)).run()


# --------------------------------------------------------------------------- #
# ops mode
# --------------------------------------------------------------------------- #
class OpsReplay:
    """Drives a KVCacheManager op by op."""

    def __init__(self, ops: list[dict[str, Any]], cfg: dict[str, Any]) -> None:
        self.ops = ops
        self.cfg = cfg
        self.requests: dict[str, Request] = {}
        self.lookups: dict[str, tuple[Any, int]] = {}

    def build(self) -> dict[str, Any]:
        """Build the manager and return the header line."""
        cfg = self.cfg
        hash_fn, none_hash = init_none_hash(cfg["hash_algo"], cfg["none_hash_seed"])
        bs = int(cfg["block_size"])
        self.block_hasher = kv_cache_utils.get_request_block_hasher(bs, hash_fn)
        vllm_config = build_vllm_config(ops_as_steps_config(cfg), int(cfg["max_model_len"]))
        register_all_kvcache_specs(vllm_config)
        self.manager = KVCacheManager(
            kv_cache_config=kv_cache_config_for(cfg),
            max_model_len=int(cfg["max_model_len"]),
            scheduler_block_size=bs,
            hash_block_size=bs,
            enable_caching=bool(cfg["enable_caching"]),
            log_stats=True,
            enable_kv_cache_events=bool(cfg["enable_kv_cache_events"]),
            watermark=float(cfg["watermark"]),
        )
        return {
            "type": "header",
            "vllm_version": vllm.__version__,
            "num_gpu_blocks": int(cfg["num_gpu_blocks"]),
            "block_size": bs,
            "enable_caching": bool(cfg["enable_caching"]),
            "kv_groups": ",".join(GROUP_KINDS[k][1] for k in cfg["kv_groups"]),
            "coordinator": type(self.manager.coordinator).__name__,
            "hash_algo": cfg["hash_algo"],
            "none_hash_seed": cfg["none_hash_seed"],
            "none_hash": none_hash.hex(),
        }

    def state(self) -> dict[str, Any]:
        """Pool state appended to every op line."""
        pool = self.manager.block_pool
        cached: set[int] = set()
        for value in pool.cached_block_hash_to_block._cache.values():
            group = value.values() if isinstance(value, dict) else [value]
            cached.update(b.block_id for b in group)
        state = {
            "num_free_blocks": pool.get_num_free_blocks(),
            "usage": rounded(self.manager.usage),
            "free_queue": [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
            "cached_block_ids": sorted(cached),
        }
        if self.cfg["enable_kv_cache_events"]:
            state["kv_events"] = [type(e).__name__ for e in self.manager.take_events()]
        return state

    def op_add(self, op: dict[str, Any]) -> dict[str, Any]:
        """Create a request (hashes its full blocks)."""
        arrival = float(op.get("arrival_time", len(self.requests)))
        req = make_request(op, arrival, self.block_hasher, int(op.get("max_tokens", 1 << 20)))
        self.requests[req.request_id] = req
        return {"num_block_hashes": len(req.block_hashes)}

    def op_get_computed_blocks(self, op: dict[str, Any]) -> dict[str, Any]:
        """Prefix-cache lookup; the hit is kept for the next allocate_slots."""
        req = self.requests[op["request_id"]]
        blocks, hits, boundary = self.manager.get_computed_blocks(
            req, op.get("max_cache_hit_length")
        )
        req.shared_prefix_boundary = boundary
        self.lookups[req.request_id] = (blocks, hits)
        return {"block_ids": [list(g) for g in blocks.get_block_ids()], "num_computed_tokens": hits}

    def op_allocate_slots(self, op: dict[str, Any]) -> dict[str, Any]:
        """allocate_slots with the pending lookup's hit; 'rest' = all remaining tokens."""
        req = self.requests[op["request_id"]]
        lookup = self.lookups.pop(req.request_id, None)
        blocks, hits = lookup if lookup else (None, 0)
        n = op["num_new_tokens"]
        if n == "rest":
            n = req.num_tokens - req.num_computed_tokens - hits
        new = self.manager.allocate_slots(
            req,
            int(n),
            num_new_computed_tokens=hits,
            new_computed_blocks=blocks,
            num_lookahead_tokens=int(op.get("num_lookahead_tokens", 0)),
            full_sequence_must_fit=bool(op.get("full_sequence_must_fit", False)),
        )
        if new is None:
            return {
                "num_new_tokens": n,
                "new_block_ids": None,
                "num_computed_tokens": req.num_computed_tokens,
            }
        if lookup is not None:
            self.manager.record_prefix_cache_stats(req, hits)
        req.num_computed_tokens += hits + int(n)
        return {
            "num_new_tokens": n,
            "new_block_ids": [list(g) for g in new.get_block_ids()],
            "num_computed_tokens": req.num_computed_tokens,
        }

    def op_block_hashes(self, op: dict[str, Any]) -> dict[str, Any]:
        """The request's block hashes, hex."""
        req = self.requests[op["request_id"]]
        return {"block_hashes": [bytes(h).hex() for h in req.block_hashes]}

    def op_append_tokens(self, op: dict[str, Any]) -> dict[str, Any]:
        """Append output tokens (as the model would); new full blocks get hashed."""
        req = self.requests[op["request_id"]]
        req.append_output_token_ids(list(op["token_ids"]))
        return {"num_tokens": req.num_tokens, "num_block_hashes": len(req.block_hashes)}

    def op_free(self, op: dict[str, Any]) -> dict[str, Any]:
        """Release every block of the request."""
        self.manager.free(self.requests[op["request_id"]])
        return {}

    def op_reset_prefix_cache(self, op: dict[str, Any]) -> dict[str, Any]:
        """Drop the prefix cache (only works when nothing is allocated)."""
        return {"ok": bool(self.manager.reset_prefix_cache())}

    def op_get_block_ids(self, op: dict[str, Any]) -> dict[str, Any]:
        """The request's current block table."""
        ids = self.manager.get_block_ids(op["request_id"])
        return {"block_ids": [list(g) for g in ids]}

    def op_new_step(self, op: dict[str, Any]) -> dict[str, Any]:
        """Tell the manager a scheduler step begins."""
        self.manager.new_step_starts()
        return {}

    def run(self) -> Iterable[dict[str, Any]]:
        """Yield the header, one line per op and the summary."""
        yield self.build()
        for i, op in enumerate(self.ops):
            handler = getattr(self, "op_" + op["op"], None)
            if handler is None:
                raise ValueError(f"unknown op {op['op']!r}")
            line: dict[str, Any] = {"type": "op", "i": i, "op": op["op"]}
            if "request_id" in op:
                line["request_id"] = op["request_id"]
            line.update(handler(op))
            line.update(self.state())
            yield line
        stats = self.manager.make_prefix_cache_stats()
        yield {
            "type": "summary",
            "prefix_cache": {
                "requests": stats.requests if stats else 0,
                "queries": stats.queries if stats else 0,
                "hits": stats.hits if stats else 0,
            },
        }


def ops_as_steps_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """A steps-mode config carrying the ops knobs (to build a VllmConfig)."""
    steps = dict(STEPS_DEFAULTS)
    steps.update(
        block_size=cfg["block_size"],
        num_gpu_blocks=cfg["num_gpu_blocks"],
        enable_prefix_caching=cfg["enable_caching"],
        prefix_caching_hash_algo=cfg["hash_algo"],
        max_num_batched_tokens=max(2048, int(cfg["max_model_len"])),
    )
    return steps


def run_ops(ops: Any, config: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """Drive a KVCacheManager from an op list (path or list)."""
    cfg = merged(OPS_DEFAULTS, config)
    return OpsReplay(load_json(ops), cfg).run()


# --------------------------------------------------------------------------- #
# sizing mode
# --------------------------------------------------------------------------- #
DTYPES = {
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "float32": torch.float32,
    "fp32": torch.float32,
    "fp8": torch.float8_e4m3fn,
    "float8_e4m3fn": torch.float8_e4m3fn,
}


def layer_spec(layer: dict[str, Any], block_size: int) -> Any:
    """A real-sized KV spec for one layer description."""
    kind = layer.get("kind", "full")
    common = {
        "block_size": block_size,
        "num_kv_heads": int(layer.get("num_kv_heads", 1)),
        "head_size": int(layer["head_size"]),
        "dtype": DTYPES[layer.get("dtype", "bfloat16")],
    }
    if kind == "mla":
        return MLAAttentionSpec(**common)
    canonical = GROUP_KINDS[kind][0]
    if canonical == "sliding_window":
        return SlidingWindowSpec(**common, sliding_window=int(layer["sliding_window"]))
    if canonical == "chunked_local":
        return ChunkedLocalAttentionSpec(
            **common, attention_chunk_size=int(layer["attention_chunk_size"])
        )
    return FullAttentionSpec(**common)


def sizing_layers(cfg: dict[str, Any]) -> dict[str, Any]:
    """Layer name -> spec, with layers numbered in the order given."""
    specs: dict[str, Any] = {}
    block_size = int(cfg.get("block_size", 16))
    for layer in cfg["layers"]:
        for _ in range(int(layer.get("count", 1))):
            specs[f"model.layers.{len(specs)}.attn"] = layer_spec(layer, block_size)
    return specs


def run_sizing(config: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """vLLM's num_blocks and group structure for a layer list and memory budget."""
    workers = int(config.get("num_workers", 1))
    avail = config["available_bytes"]
    memory = [int(a) for a in avail] if isinstance(avail, list) else [int(avail)] * workers
    steps_cfg = dict(STEPS_DEFAULTS)
    steps_cfg.update(block_size=int(config.get("block_size", 16)), num_gpu_blocks=1)
    vllm_config = build_vllm_config(steps_cfg, int(config.get("max_model_len", 4096)))
    # A GPU engine resolves these at start-up; a CPU-only build would disable HMA.
    hybrid = bool(config.get("hybrid_kv_cache_manager", True))
    vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = not hybrid
    vllm_config.cache_config.kv_cache_layout = config.get("kv_cache_layout", "LBNHC")
    register_all_kvcache_specs(vllm_config)
    specs = [sizing_layers(config) for _ in memory]
    groups = kv_cache_planning.get_global_kv_cache_groups(vllm_config, specs)
    kv_cfg = kv_cache_planning.get_kv_cache_configs(vllm_config, specs, memory, groups)[0]
    yield {
        "vllm_version": vllm.__version__,
        "available_bytes": memory[0] if len(set(memory)) == 1 else memory,
        "kv_cache_layout": kv_cfg.kv_cache_layout or vllm_config.cache_config.kv_cache_layout,
        "hybrid_kv_cache_manager": not vllm_config.scheduler_config.disable_hybrid_kv_cache_manager,
        "num_blocks": kv_cfg.num_blocks,
        "groups": [group_json(g) for g in kv_cfg.kv_cache_groups],
        "kv_cache_tensors": [
            {"size": t.size, "num_layers": len(t.layers)} for t in kv_cfg.kv_cache_tensors
        ],
    }


def group_json(group: KVCacheGroupSpec) -> dict[str, Any]:
    """One KV-cache group of a sizing result."""
    spec = group.kv_cache_spec
    return {
        "spec": type(spec).__name__,
        "num_layers": len(group.layer_names),
        "block_size": spec.block_size,
        "page_size_bytes": spec.page_size_bytes,
        "sliding_window": getattr(spec, "sliding_window", None),
    }


# --------------------------------------------------------------------------- #
# output and CLI
# --------------------------------------------------------------------------- #
def write_lines(lines: Iterable[dict[str, Any]], out: str | None) -> None:
    """Write JSON lines to a file, or to stdout when out is None."""
    if out is None:
        for line in lines:
            sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        return
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def write_sizing(config: dict[str, Any], out: str | None) -> None:
    """Write the sizing result as indented JSON (like kvcfg_*.json)."""
    (result,) = list(run_sizing(config))
    text = json.dumps(result, indent=1) + "\n"
    if out is None:
        sys.stdout.write(text)
        return
    with open(out, "w") as f:
        f.write(text)


def run_job(job: dict[str, Any]) -> None:
    """Run one batch job and write its output."""
    mode = job["mode"]
    config = load_json(job.get("config", {}))
    out = job.get("out")
    if mode == "steps":
        write_lines(run_steps(job["trace"], config), out)
    elif mode == "ops":
        write_lines(run_ops(job["ops"], config), out)
    elif mode == "sizing":
        write_sizing(config, out)
    elif mode == "cudagraph":  # vLLM's capture sizes (cudagraph_driver.py, beside this)
        sizes = _load_by_path("cudagraph_driver.py").sizes_of
        write_lines(({"sizes": sizes(case)} for case in job["cases"]), out)
    else:
        raise ValueError(f"unknown mode {mode!r}")


def run_batch(jobs: list[dict[str, Any]], keep_going: bool) -> int:
    """Run every job in this process; returns the number of failed jobs."""
    failures = 0
    for i, job in enumerate(jobs):
        t0 = time.perf_counter()
        try:
            run_job(job)
        except Exception as exc:
            failures += 1
            print(f"job {i} ({job.get('out')}): {type(exc).__name__}: {exc}", file=sys.stderr)
            if not keep_going:
                raise
        else:
            print(f"job {i} done in {time.perf_counter() - t0:.3f}s", file=sys.stderr)
    return failures


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line interface."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    for mode, what in (("steps", "trace"), ("ops", "op list")):
        s = sub.add_parser(mode, help=f"replay a {what}")
        s.add_argument("input", help=f"{what} JSON file")
        s.add_argument("--config", required=True, help="config JSON file")
        s.add_argument("--out", help="output JSONL file (default stdout)")
    s = sub.add_parser("sizing", help="vLLM's KV-cache sizing")
    s.add_argument("config", help="sizing config JSON file")
    s.add_argument("--out", help="output JSON file (default stdout)")
    s = sub.add_parser("batch", help="run many jobs in one process")
    s.add_argument("jobs", help="JSON file listing jobs")
    s.add_argument("--keep-going", action="store_true", help="continue after a failed job")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    if args.mode == "steps":
        write_lines(run_steps(args.input, load_json(args.config)), args.out)
    elif args.mode == "ops":
        write_lines(run_ops(args.input, load_json(args.config)), args.out)
    elif args.mode == "sizing":
        write_sizing(load_json(args.config), args.out)
    else:
        return 1 if run_batch(load_json(args.jobs), args.keep_going) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
