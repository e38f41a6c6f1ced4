#!/usr/bin/env bash
# GPU check for kvsim calibrate (CUDA machine, torch + triton, no network, < 5 min).
# Usage: calibrate/gpu_check.sh OUT_DIR [MODEL] [NUM_LAYERS]
# Prints versions, checks the Triton paged-attention kernel against the torch reference
# in bf16/fp16, then runs the CUDA sweep + profile_run of a Llama-3.1-8B-shaped model
# (NUM_LAYERS layers, default 8) and writes calibration.yaml, calibration.csv,
# kernel_check.json and gpu_check.log into OUT_DIR.
set -euo pipefail
out="${1:?usage: calibrate/gpu_check.sh OUT_DIR [MODEL] [NUM_LAYERS]}"
model="${2:-Llama-3.1-8B}"
layers="${3:-8}"
py="${PYTHON:-python3}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$(dirname "$0")/.."
missing=$("$py" - <<'PY'
import importlib.util
need = ["torch", "triton", "numpy", "pydantic", "yaml"]
print(" ".join(m for m in need if importlib.util.find_spec(m) is None))
PY
)
if [ -n "$missing" ]; then
  echo "gpu_check: missing Python modules: $missing (install wheels carried with the repo)" >&2
  exit 2
fi
timeout 290 "$py" -m calibrate.harness.gpu_check "$out" --model "$model" --num-layers "$layers" \
  2>&1 | tee "$out/gpu_check.log"
