#!/usr/bin/env bash
# Create .venv-vllm: vLLM 0.33.0 on a CPU-only machine, the conformance oracle for kvcore.
#
# Usage: scripts/setup_vllm_oracle.sh [VENV_DIR]    (default: .venv-vllm in the repo root)
#
# Idempotent: when VENV_DIR already imports vLLM 0.33.0 it exits at once. Otherwise it
# installs (about 1.5 min, 390 MB download) as ../shared/notes/vllm_oracle.md describes:
# the CPU torch 2.13.0 first, then vLLM without its dependencies (a plain `pip install
# vllm` would pull a CUDA torch and several GB of NVIDIA wheels), then the pure-Python
# dependencies its core imports, then xgrammar without dependencies (avoids triton).
# Environment: PYTHON (interpreter for the venv, default python3), TORCH_INDEX_URL (optional).
set -euo pipefail

VLLM_VERSION=0.33.0
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-vllm}"
PY="$VENV/bin/python"

check() {
    "$PY" -c "import vllm; assert vllm.__version__ == '$VLLM_VERSION', vllm.__version__" \
        >/dev/null 2>&1
}

if [ -x "$PY" ] && check; then
    echo "vLLM $VLLM_VERSION oracle environment ready: $VENV"
    exit 0
fi

echo "creating the vLLM $VLLM_VERSION oracle environment in $VENV (CPU only)" >&2
if [ ! -x "$PY" ]; then
    "${PYTHON:-python3}" -m venv "$VENV"
fi
PIP=("$PY" -m pip install --disable-pip-version-check --quiet)

# The CPU build (vLLM pins 2.14.0, but its core runs on this). Where the default index
# serves CUDA builds, set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu.
"${PIP[@]}" torch==2.13.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
"${PIP[@]}" --no-deps "vllm==$VLLM_VERSION"
"${PIP[@]}" packaging "pydantic>=2.12.0" numpy regex cbor2 psutil "pyzmq>=25" urllib3 \
    "transformers>=5.16.1,<5.21.0" "tokenizers>=0.23.2" "huggingface_hub>=1.31.0" \
    "aiohttp>=3.14.4" "requests>=2.33.0" "oss-harmony>=0.0.11" "openai>=2.25.0" \
    "pillow>=13.0.0" pybase64 cachetools msgspec cloudpickle uvloop py-cpuinfo \
    "prometheus_client>=0.18.0" "fastapi>=0.133.0,<0.137.0" partial-json-parser \
    "llguidance>=1.7.0,<1.8.0" "apache-tvm-ffi==0.1.11" xxhash blake3 einops
"${PIP[@]}" --no-deps xgrammar==0.2.8

if ! check; then
    echo "error: $VENV does not import vLLM $VLLM_VERSION after installation" >&2
    exit 1
fi
echo "vLLM $VLLM_VERSION oracle environment ready: $VENV"
