"""What a client measures beyond the engine: the API server's costs around each request.

kvsim's engine reports engine-side times, as vLLM's own request metrics do (from the
request's arrival to its first and last token). A benchmark client (``vllm bench
serve``, inference-perf, GuideLLM) measures from sending the request to receiving the
first and the last streamed chunk. That adds the HTTP round trip, request handling and
the streaming of the first chunk, and the detokenizer's set-up at the first token, which
vLLM 0.33.0 primes with the whole prompt (``vllm/v1/engine/detokenizer.py``,
``FastIncrementalDetokenizer``).

The model, per request with ``P`` prompt tokens (seconds):

* client TTFT = engine TTFT + ``request_s`` + ``per_prompt_token_s * P``;
* client E2E = engine E2E + ``request_s`` + ``per_prompt_token_s * P``: the last chunk
  reaches the client as late as the first one did, relative to the engine;
* client TPOT = (client E2E - client TTFT) / (output tokens - 1) = engine TPOT.

The costs do not delay the engine's schedule (they happen in the API server's process,
beside the engine core). Defaults, from public measurements:

* ``request_s`` 10 ms: the client's TTFT exceeded vLLM's server-side TTFT metric by
  8.4-12.2 ms (mean about 10.6 ms over six runs) in vllm-project/vllm#54628 (512-token
  prompts, a single GPU);
* ``per_prompt_token_s`` 1 us: priming the incremental detokenizer with the prompt
  costs 0.5-1.5 us per prompt token on the API server's event loop, inside the
  streaming TTFT (vllm-project/vllm#51281, tokenizers 0.22).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class FrontendModel:
    """Client-side costs per request (see the module docstring); seconds."""

    request_s: float = 10e-3
    per_prompt_token_s: float = 1e-6

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value >= 0):
                raise ValueError(f"frontend {name}: must be a number >= 0 seconds (got {value!r})")

    def delay_s(self, prompt_tokens: np.ndarray) -> np.ndarray:
        """Seconds the client sees each request's first and last chunk after the engine
        produced them."""
        return self.request_s + self.per_prompt_token_s * np.asarray(prompt_tokens, float)

    def describe(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}
