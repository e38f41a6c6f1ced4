"""kvcore: a clock-free Python port of vLLM 0.33.0 V1 KV-cache core and scheduler."""

from kvcore.native import install_guard as _install_guard

__version__ = "0.1.0"
VLLM_VERSION = "0.33.0"

NATIVE_STATUS = _install_guard()
"""Which build of the hot modules (kvcore's and the simulator's, listed in
``kvcore.native.NATIVE_MODULES``) runs: "compiled" (mypyc, see
:mod:`kvcore.native`), "pure", or "stale" / "disabled" (compiled files present but
not used: they do not match their sources, or ``KVSIM_PURE_PYTHON=1``)."""
