"""kvcore: a clock-free Python port of vLLM 0.33.0 V1 KV-cache core and scheduler."""

__version__ = "0.1.0"
VLLM_VERSION = "0.33.0"
