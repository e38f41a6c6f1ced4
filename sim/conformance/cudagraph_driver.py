"""Run inside the vLLM oracle environment: vLLM 0.33.0's own CUDA graph capture sizes.

    .venv-vllm/bin/python sim/conformance/cudagraph_driver.py < cases.json

Each case ``[max_num_seqs, max_num_batched_tokens, compute_capability,
decode_query_len]`` is given to ``VllmConfig._set_cudagraph_sizes`` on a stand-in
configuration holding only what that method reads (graphs on, no sizes given,
``performance_mode`` "balanced", the platform reporting the case's capability); the
sizes it sets are printed as one JSON list per case. Standard library and vLLM only:
``vllm_driver.py``'s ``cudagraph`` batch mode calls :func:`sizes_of`, and
:mod:`sim.conformance.differential` compares them with :mod:`calibrate.cudagraph_sizes`.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace


def sizes_of(case: list) -> list[int]:
    import vllm.platforms as platforms
    from vllm.config.compilation import CUDAGraphMode
    from vllm.config.vllm import VllmConfig

    max_num_seqs, max_num_batched_tokens, capability, query_len = case
    major = int(str(capability).split(".")[0])
    # is_device_capability_family(100) asks whether the major version is 10
    platforms.current_platform.is_device_capability_family = lambda family: family // 10 == major
    compilation = SimpleNamespace(
        cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE,
        max_cudagraph_capture_size=None,
        cudagraph_capture_sizes=None,
        post_init_cudagraph_sizes=lambda: None,
    )
    config = SimpleNamespace(
        model_config=SimpleNamespace(enforce_eager=False),
        compilation_config=compilation,
        uniform_decode_query_len=query_len,
        scheduler_config=SimpleNamespace(
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens
        ),
        speculative_config=None,
        performance_mode="balanced",
        parallel_config=SimpleNamespace(tensor_parallel_size=1, data_parallel_size=1),
    )
    VllmConfig._set_cudagraph_sizes(config)
    return list(compilation.cudagraph_capture_sizes)


def main() -> None:
    cases = json.load(sys.stdin)
    for case in cases:
        print(json.dumps(sizes_of(case)))


if __name__ == "__main__":
    main()
