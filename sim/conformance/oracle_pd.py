"""vLLM's side of a P/D case, what goes into vLLM: the scheduler with the NIXL
connector built from a case's knobs, the trace's requests with their transfer
parameters, and the fake model's output of a batch (sampled tokens, the fake
worker's report as the connector output).

Part of the P/D oracle driver (``pd_driver.py``), which loads it by path; standard
library, vLLM and siblings loaded by path only.
"""

from __future__ import annotations

import copy
from typing import Any

from oracle_load import load_by_path
from vllm.config import KVTransferConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request

oracle_config = load_by_path("oracle_config.py")
oracle_scheduler = load_by_path("oracle_scheduler.py")
pd_case = load_by_path("pd_case.py")


def build(cfg: dict[str, Any], max_model_len: int) -> Scheduler:
    """vLLM's scheduler for a case, with the NIXL connector (pull or push) in the
    case's KV role; a ``RecordingAsyncScheduler`` with ``async_scheduling``."""
    steps_cfg = oracle_config.merged(
        oracle_config.STEPS_DEFAULTS,
        {
            k: cfg[k]
            for k in (
                "block_size",
                "num_gpu_blocks",
                "max_num_seqs",
                "max_num_batched_tokens",
                "enable_chunked_prefill",
                "long_prefill_token_threshold",
                "policy",
                "scheduler_reserve_full_isl",
                "prefix_caching_hash_algo",
                "async_scheduling",
            )
        },
    )
    ktc = KVTransferConfig(
        kv_connector="NixlPushConnector" if cfg["mode"] == "push" else "NixlConnector",
        kv_role=pd_case.kv_role(cfg),
        engine_id="kvsim-" + cfg["role"],
        kv_load_failure_policy=cfg["kv_load_failure_policy"],
    )
    vllm_config = oracle_config.build_vllm_config(steps_cfg, max_model_len, kv_transfer_config=ktc)
    if bool(cfg["async_scheduling"]) != bool(vllm_config.scheduler_config.async_scheduling):
        raise ValueError("vLLM changed async scheduling for this configuration")
    register_all_kvcache_specs(vllm_config)
    return oracle_scheduler.new_scheduler(
        vllm_config,
        oracle_config.kv_cache_config_for(steps_cfg),
        int(cfg["block_size"]),
        bool(cfg["async_scheduling"]),
    )


def make_request(spec: dict[str, Any], arrival: float, hasher: Any) -> Request:
    """A trace request for vLLM, its ``kv_transfer_params`` (a fresh copy: the
    connector writes into it) in ``SamplingParams.extra_args``."""
    extra = None
    if spec.get("kv_transfer_params") is not None:
        extra = {"kv_transfer_params": copy.deepcopy(spec["kv_transfer_params"])}
    params = SamplingParams(max_tokens=int(spec["max_tokens"]), ignore_eos=True, extra_args=extra)
    return Request(
        request_id=str(spec["request_id"]),
        prompt_token_ids=list(spec["prompt_token_ids"]),
        sampling_params=params,
        pooling_params=None,
        arrival_time=arrival,
        priority=int(spec.get("priority", 0)),
        block_hasher=hasher,
    )


def kv_output(report: dict[str, list[Any]]) -> KVConnectorOutput:
    """The fake worker's report as the batch's connector output."""
    return KVConnectorOutput(
        # lists, not sets: vLLM iterates them, the order stays fixed
        finished_sending=report["sending"] or None,
        finished_recving=report["recving"] or None,
        failed_recving=set(report["failed"]),
        invalid_block_ids=set(report["invalid"]),
    )


def sampled_for(sched: Scheduler, out: Any, token: int) -> list[list[int]]:
    """The fake model's tokens: one for each request past its prefill chunks."""
    return [
        [] if sched.requests[rid].is_prefill_chunk else [token] for rid in out.num_scheduled_tokens
    ]


def model_output(req_ids: list[str], sampled: list[list[int]], report: dict) -> ModelRunnerOutput:
    """The fake model's output of a batch: its sampled tokens and the worker's report."""
    return ModelRunnerOutput(
        req_ids=req_ids,
        req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
        sampled_token_ids=sampled,
        kv_connector_output=kv_output(report),
    )
