"""The batch sizes vLLM 0.33.0 captures CUDA graphs for (the padding they imply:
``RooflineLatencyModel.graph_tokens`` and its scalar twin).

vLLM runs a step whose token count fits a captured graph by padding it to the smallest
captured size at least that large (full graphs for uniform decode batches, piecewise
graphs around attention for mixed ones: ``CudagraphDispatcher``), so the model's
matrix multiplies and the collectives inside the graph work on the padded tokens; a
larger step runs eagerly, unpadded. Attention (outside the piecewise graph, and on
the real requests' KV inside a full one) and the LM head (on the sampled positions)
are not padded.

:func:`capture_sizes` mirrors ``VllmConfig._set_cudagraph_sizes``' defaults
(``performance_mode`` "balanced", no sizes given): 1, 2, 4, then every 8 below 256 and
every 16 from 256, up to ``min(2 * max_num_seqs * q, 512)`` tokens (1024 on data-centre
Blackwell, compute capability 10.x) and ``max_num_batched_tokens``, plus
``max_num_batched_tokens`` itself when it fits, and the uniform decode batches of
``q = 1 + num_speculative_tokens`` tokens per request (with ``q`` 1, ``max_num_seqs``
when it fits). ``enforce_eager`` captures none.
"""

from __future__ import annotations


def _request_counts(max_reqs: int, ceiling: int) -> list[int]:
    """vLLM's request-count grid for uniform decode batches of several tokens each."""
    max_reqs = min(max_reqs, ceiling)
    counts = [n for n in (1, 2, 4) if n <= max_reqs]
    counts += list(range(8, min(max_reqs + 1, 256), 8))
    counts += list(range(256, max_reqs + 1, 16))
    return sorted(set(counts + [max_reqs]))


def capture_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    compute_capability: str | None = None,
    decode_query_len: int = 1,
    enforce_eager: bool = False,
) -> tuple[int, ...]:
    """The token counts vLLM captures graphs for (ascending; empty: none)."""
    if enforce_eager:
        return ()
    major = (compute_capability or "").split(".")[0]
    ceiling = 1024 if major == "10" else 512
    largest = min(max_num_seqs * decode_query_len * 2, ceiling)
    if decode_query_len > 1:
        counts = _request_counts(max_num_seqs, ceiling)
        decode = sorted({n * decode_query_len for n in counts})
        decode = [s for s in decode if s <= largest]
    else:
        decode = [max_num_seqs] if max_num_seqs <= largest else []
    largest = min(max_num_batched_tokens, largest)
    sizes = [i for i in (1, 2, 4) if i <= largest]
    if largest >= 8:
        sizes += list(range(8, min(largest + 1, 256), 8))
    if largest >= 256:
        sizes += list(range(256, largest + 1, 16))
    if max_num_batched_tokens <= largest:
        sizes.append(max_num_batched_tokens)
    sizes += [s for s in decode if s <= max_num_batched_tokens]
    return tuple(sorted(set(sizes)))
