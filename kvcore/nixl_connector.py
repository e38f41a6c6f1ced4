"""The scheduler side of vLLM's NIXL connector: prefill/decode disaggregation.

Mirrors ``NixlPullConnectorScheduler`` (``pull_scheduler.py``, vLLM's default, the
decode side READs the prefill side's blocks) and ``NixlPushConnectorScheduler``
(``push_scheduler.py``, the prefill side WRITEs them), both over
``NixlBaseConnectorScheduler`` (``base_scheduler.py``), in
``vllm/distributed/kv_transfer/kv_connector/v1/nixl/`` of vLLM 0.33.0, for one
full-attention KV cache group.

What the scheduler side decides (the worker side moves the bytes and reports back):

* **Prefill instance** (a request whose ``kv_transfer_params`` say
  ``do_remote_decode``). It is scheduled as any request; when it finishes normally
  (length cap or stop), ``request_finished`` keeps its blocks (*delay free*) for the
  decode side and returns the parameters that side needs: ``remote_block_ids`` (the
  blocks of its computed tokens), ``remote_num_tokens``, ``remote_request_id``...
  The next ``build_connector_meta`` hands the request to the workers in
  ``reqs_to_send`` with its lease (``kv_lease_duration``, 30 s); the blocks are
  freed when the workers report it in ``finished_sending`` (the decode side read
  them, or the lease ran out: the worker enforces it). An aborted request is freed
  at once (``reqs_not_processed``).
* **Decode instance** (``do_remote_prefill`` with the prefill side's
  ``remote_block_ids`` and coordinates). ``get_num_new_matched_tokens`` reports the
  whole prompt past the local prefix-cache hit as external and asynchronous; the
  scheduler allocates its blocks and parks it in ``WAITING_FOR_REMOTE_KVS``;
  ``update_state_after_alloc`` records the blocks to fill (the table's blocks not in
  the prefix cache) and clears ``do_remote_prefill`` so that there is one transfer
  per request; the workers report ``finished_recving`` (or a failure:
  ``failed_recving`` with ``invalid_block_ids``, which the scheduler handles by its
  ``kv_load_failure_policy``). A request aborted before it was ever scheduled still
  gets an empty receive, so that the prefill side is told to free its blocks.
* **Push mode**: the decode side registers its blocks (``push_registrations``) and
  waits; the prefill side ships its finished blocks (``push_finished_blocks``) and
  keeps the engine stepping until the write is done (``has_pending_push_work``).

Left out (the scheduler side of features kvsim does not model; :meth:`check_supported`
refuses the layouts): hybrid models (sliding-window, Mamba groups, and so the
clipping of blocks to the window), prompt truncation on the prefill side (needed only
for Mamba, DSV41 bounded replay or multi-module MTP: ``_prefill_backoff`` is 0
otherwise), host-buffer staging (``use_host_buffer``: only when the accelerator
cannot be read by NIXL), bidirectional transfers (decode-to-prefill turn-2 reads),
heartbeats, the handshake listener and the push registration watchdog (all on wall
clock time; none changes what is scheduled). There is no clock: ``reqs_to_send``
holds each request's lease in seconds where vLLM stores ``perf_counter() + lease``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from kvcore.kv_cache_interface import FullAttentionSpec, KVCacheConfig
from kvcore.kv_cache_manager import KVCacheBlocks
from kvcore.kv_connector_output import KVConnectorOutput
from kvcore.request import Request, RequestStatus

KVRole = Literal["kv_producer", "kv_consumer", "kv_both"]
TransferMode = Literal["pull", "push"]

_REMOTE_FIELDS = ("remote_engine_id", "remote_request_id", "remote_host", "remote_port")
_NORMAL_FINISH = (RequestStatus.FINISHED_LENGTH_CAPPED, RequestStatus.FINISHED_STOPPED)


@dataclass(slots=True)
class NixlRecvRequest:
    """Mirrors the ``ReqMeta`` of ``NixlConnectorMetadata.reqs_to_recv``: one receive.

    ``local_block_ids``: the blocks to fill, per group (empty: only tell the prefill
    side to free, as after an abort before scheduling); ``awaiting_kvs``: the request
    waits in ``WAITING_FOR_REMOTE_KVS`` for it (the worker reports it done)."""

    request_id: str
    local_block_ids: tuple[list[int], ...]
    local_num_computed_blocks: tuple[int, ...]
    awaiting_kvs: bool
    remote_block_ids: Any
    remote_request_id: str | None


@dataclass(slots=True)
class NixlConnectorMetadata:
    """Mirrors ``NixlConnectorMetadata`` (``nixl/metadata.py``): what one step asks of
    the workers. ``reqs_to_send``: request -> lease in seconds (vLLM: a deadline)."""

    reqs_to_recv: dict[str, NixlRecvRequest] = field(default_factory=dict)
    reqs_to_send: dict[str, float] = field(default_factory=dict)
    reqs_in_batch: set[str] = field(default_factory=set)
    reqs_not_processed: set[str] = field(default_factory=set)
    push_registrations: dict[str, tuple[list[int], ...]] = field(default_factory=dict)
    """Push, decode side: request -> its blocks to be written."""
    push_finished_blocks: dict[str, tuple[list[int], ...]] = field(default_factory=dict)
    """Push, prefill side: request -> its finished blocks to write."""


class NixlConnectorScheduler:
    """Mirrors vLLM 0.33.0's ``NixlPullConnectorScheduler`` (``mode="pull"``) and
    ``NixlPushConnectorScheduler`` (``mode="push"``), with the ``NixlBaseConnector``
    facade methods the scheduler calls.

    ``kv_role``: ``kv_producer`` on a prefill instance, ``kv_consumer`` on a decode
    instance (``kv_both`` is deprecated in vLLM). With async scheduling a producer
    drops the output in flight of a preempted request (``requires_kv_delivery``) and
    a consumer defers block frees by a step (the scheduler does both).
    ``kv_load_failure_policy``: ``fail`` (vLLM's default: a request whose load failed
    finishes with an error) or ``recompute`` (it computes its prompt locally).
    """

    def __init__(
        self,
        kv_cache_config: KVCacheConfig,
        kv_role: KVRole,
        mode: TransferMode = "pull",
        engine_id: str = "kvsim",
        kv_lease_duration: int = 30,
        kv_recompute_threshold: int = 64,
        kv_load_failure_policy: Literal["fail", "recompute"] = "fail",
    ) -> None:
        self.check_supported(kv_cache_config)
        if kv_role not in ("kv_producer", "kv_consumer", "kv_both"):
            raise ValueError(f"kv_role must be kv_producer, kv_consumer or kv_both, not {kv_role}")
        if mode not in ("pull", "push"):
            raise ValueError(f"mode must be pull or push, not {mode}")
        if kv_load_failure_policy not in ("fail", "recompute"):
            raise ValueError(
                f"kv_load_failure_policy must be fail or recompute, not {kv_load_failure_policy}"
            )
        self.kv_role = kv_role
        self.mode = mode
        self.engine_id = engine_id
        self.kv_lease_duration = kv_lease_duration
        self.kv_recompute_threshold = kv_recompute_threshold
        self.kv_load_failure_policy = kv_load_failure_policy
        self.is_kv_producer = kv_role in ("kv_producer", "kv_both")
        self.is_kv_consumer = kv_role in ("kv_consumer", "kv_both")
        self.requires_kv_delivery = self.is_kv_producer
        self._reqs_need_recv: dict[str, NixlRecvRequest] = {}
        self._reqs_need_send: dict[str, float] = {}
        self._reqs_in_batch: set[str] = set()
        self._reqs_not_processed: set[str] = set()
        self._push_pending_registrations: dict[str, tuple[list[int], ...]] = {}
        self._finished_request_blocks: dict[str, tuple[list[int], ...]] = {}
        self._newly_finished_push_blocks: dict[str, tuple[list[int], ...]] = {}

    @staticmethod
    def check_supported(kv_cache_config: KVCacheConfig) -> None:
        """Raise ValueError for KV layouts this port does not cover (see module)."""
        groups = kv_cache_config.kv_cache_groups
        if len(groups) != 1 or type(groups[0].kv_cache_spec) is not FullAttentionSpec:
            raise ValueError("the NIXL connector is modelled for one full-attention KV group")

    # -- requests ------------------------------------------------------------------

    def on_new_request(self, request: Request) -> None:
        """``on_new_request``: prompt truncation and heartbeats only (neither is
        modelled: without Mamba or multi-module MTP nothing is truncated)."""

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        """Tokens past the local hit ``num_computed_tokens`` that come from the remote
        instance, and whether they come asynchronously (always, when there are any)."""
        params = request.kv_transfer_params
        if params is None:
            return 0, False
        if params.get("do_remote_prefill"):
            # The whole prompt (no prefill backoff without Mamba / multi-module MTP).
            count = len(request.prompt_token_ids) - num_computed_tokens
            if count > 0:
                return count, True
        if (
            self.mode == "pull"
            and params.get("do_remote_decode")
            and params.get("remote_block_ids")
            and all(p in params for p in _REMOTE_FIELDS)
        ):
            # A prefill-side request carrying a decode side's blocks (bidirectional
            # transfers, not modelled: no receive is ever issued for it).
            remote_num_tokens = params.get("remote_num_tokens") or 0
            count = min(remote_num_tokens, request.num_prompt_tokens) - num_computed_tokens
            if count > 0:
                if self.kv_recompute_threshold > 0 and count < self.kv_recompute_threshold:
                    return 0, False
                return count, True
        return 0, False

    def update_state_after_alloc(
        self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int
    ) -> None:
        """After the scheduler allocated ``blocks`` (the request's whole table): note a
        prefill-side request as in the batch; record a decode-side receive."""
        params = request.kv_transfer_params
        if not params:
            return
        if params.get("do_remote_decode"):
            self._reqs_in_batch.add(request.request_id)
        if self.mode == "push":
            self._push_after_alloc(request, params, blocks, num_external_tokens)
            return
        if not params.get("do_remote_prefill"):
            return
        if params.get("remote_block_ids"):
            if all(p in params for p in _REMOTE_FIELDS):
                local = _unhashed_block_ids(blocks) if num_external_tokens > 0 else ()
                computed = tuple(
                    sum(b.block_hash is not None and not b.is_null for b in group)
                    for group in blocks.blocks
                )
                self._reqs_need_recv[request.request_id] = NixlRecvRequest(
                    request.request_id,
                    local,
                    computed,
                    num_external_tokens > 0,
                    params["remote_block_ids"],
                    params["remote_request_id"],
                )
            # vLLM logs invalid parameters and goes on without a transfer.
        else:
            assert num_external_tokens == 0, "a remote prefill without remote blocks"
        params["do_remote_prefill"] = False  # one transfer per request
        params["_remote_blocks_processed"] = True

    def _push_after_alloc(
        self,
        request: Request,
        params: dict[str, Any],
        blocks: KVCacheBlocks,
        num_external_tokens: int,
    ) -> None:
        """``NixlPushConnectorScheduler.update_state_after_alloc``, decode side."""
        if not params.get("do_remote_prefill") or num_external_tokens <= 0:
            return
        local = _unhashed_block_ids(blocks)
        self._push_pending_registrations[request.request_id] = local
        params["remote_block_ids"] = ()
        self._reqs_need_recv[request.request_id] = NixlRecvRequest(
            request.request_id, local, (), False, (), params.get("remote_request_id")
        )
        params["do_remote_prefill"] = False

    def request_finished(
        self, request: Request, block_ids: tuple[list[int], ...]
    ) -> tuple[bool, dict[str, Any] | None]:
        """Before a finished request's blocks are freed: whether to keep them for the
        decode side, and the transfer parameters of its output. ``block_ids``: the
        blocks of its computed tokens (``get_block_ids_for_computed_tokens``)."""
        params = request.kv_transfer_params
        if not params:
            return False, None
        rid = request.request_id
        is_p_node = bool(params.get("do_remote_decode"))
        if params.get("do_remote_prefill"):
            # Never allocated (aborted first): still tell the prefill side to free.
            if self.mode == "push":
                params["remote_block_ids"] = ()
            self._reqs_need_recv[rid] = NixlRecvRequest(rid, (), (), False, (), None)
            params["do_remote_prefill"] = False
            return False, None
        if not is_p_node:
            return False, None
        if request.status not in _NORMAL_FINISH:
            self._reqs_not_processed.add(rid)
            return False, None
        delay_free_blocks = any(len(group) > 0 for group in block_ids)
        remote_num_tokens = 0
        if delay_free_blocks:
            self._reqs_need_send[rid] = float(self.kv_lease_duration)
            remote_num_tokens = request.num_computed_tokens
            if self.mode == "push":
                self._finished_request_blocks[rid] = block_ids
                self._newly_finished_push_blocks[rid] = block_ids
        out: dict[str, Any] = {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": block_ids,
            "remote_engine_id": self.engine_id,
            "remote_request_id": rid,
            "remote_num_tokens": remote_num_tokens,
            "transfer_mode": self.mode,
        }
        return delay_free_blocks, out

    # -- end of schedule() ---------------------------------------------------------

    def build_connector_meta(self, scheduler_output: object) -> NixlConnectorMetadata:
        """``build_connector_meta``: hand this step's receives, sends and batch
        membership to the workers, and start afresh."""
        meta = NixlConnectorMetadata(
            reqs_to_recv=self._reqs_need_recv,
            reqs_to_send=self._reqs_need_send,
            reqs_in_batch=self._reqs_in_batch,
            reqs_not_processed=self._reqs_not_processed,
        )
        self._reqs_need_recv = {}
        self._reqs_need_send = {}
        self._reqs_in_batch = set()
        self._reqs_not_processed = set()
        if self._push_pending_registrations:
            meta.push_registrations = self._push_pending_registrations
            self._push_pending_registrations = {}
        if self._newly_finished_push_blocks:
            meta.push_finished_blocks = self._newly_finished_push_blocks
            self._newly_finished_push_blocks = {}
        return meta

    # -- worker output -------------------------------------------------------------

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        """``update_connector_output``: push mode forgets the finished writes (pull
        mode only stops heartbeats, not modelled)."""
        if self.mode == "push":
            for rid in connector_output.finished_sending:
                self._finished_request_blocks.pop(rid, None)

    def has_pending_push_work(self) -> bool:
        """Push: finished blocks not yet written, or registrations not yet shipped,
        keep the engine stepping (``has_pending_push_work``)."""
        return bool(self._finished_request_blocks or self._push_pending_registrations)


def _unhashed_block_ids(blocks: KVCacheBlocks) -> tuple[list[int], ...]:
    """``KVCacheBlocks.get_unhashed_block_ids_all_groups``: per group, the blocks not
    in the prefix cache (the ones a transfer fills)."""
    return tuple(
        [b.block_id for b in group if b.block_hash is None and not b.is_null]
        for group in blocks.blocks
    )
