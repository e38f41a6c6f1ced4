"""Interop with the benchmark tools people already use.

- :mod:`sim.interop.vllm_bench`: a run as the JSON ``vllm bench serve --save-result``
  writes (vLLM 0.33.0's field names, :mod:`sim.interop.vllm_fields`);
- :mod:`sim.interop.guidellm`: a run in the shape of GuideLLM's ``benchmarks.json``;
- :mod:`sim.interop.real`: real results (a vLLM bench JSON, a GuideLLM report, an
  LLMServingSim ground-truth run) read into one form;
- :mod:`sim.interop.compare`: simulated against real, side by side;
- :mod:`sim.interop.cli`: ``kvsim export``, ``kvsim compare`` and ``run --export``.
"""
