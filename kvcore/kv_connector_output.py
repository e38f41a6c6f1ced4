"""What a KV connector's workers report after a step.

Mirrors the fields of ``KVConnectorOutput`` (``vllm/v1/outputs.py``, vLLM 0.33.0) that
kvcore's connectors produce, after vLLM's ``KVOutputAggregator`` has combined the
workers' reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class KVConnectorOutput:
    """Mirrors ``vllm.v1.outputs.KVConnectorOutput``.

    ``finished_recving``: requests whose asynchronous load is done (also a failed
    one); ``completed_jobs``: the offloading worker metadata's job id -> number of
    workers that finished it; ``finished_sending``: requests whose blocks a P/D
    prefill instance may free (read by the decode side, or lease expired);
    ``failed_recving``: requests whose load failed; ``invalid_block_ids``: blocks a
    failed load left unwritten."""

    finished_recving: set[str] = field(default_factory=set)
    completed_jobs: dict[int, int] = field(default_factory=dict)
    finished_sending: set[str] = field(default_factory=set)
    failed_recving: set[str] = field(default_factory=set)
    invalid_block_ids: set[int] = field(default_factory=set)
