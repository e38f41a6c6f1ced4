"""kvcore: a clock-free Python port of vLLM 0.33.0 V1 KV-cache core and scheduler.

``kvcore.NATIVE_STATUS`` is :data:`kvsim_native.NATIVE_STATUS`: which build of the hot
modules runs ("compiled", "pure", "stale" or "disabled")."""

# First: importing kvsim_native installs the guard that decides whether compiled modules load.
from kvsim_native import NATIVE_STATUS as NATIVE_STATUS

__version__ = "0.1.0"
VLLM_VERSION = "0.33.0"
