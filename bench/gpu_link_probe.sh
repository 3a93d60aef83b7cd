#!/usr/bin/env bash
# NIXL probe between two processes on VRAM, in one short call on a GPU machine (< 3 minutes):
#   bench/gpu_link_probe.sh [args of python -m bench.gpu_link_probe]
# Prints the table; writes $OUT/gpu_link_probe.json when OUT is set. Exits 2 without CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_link_probe: cannot run: no nvidia-smi on this machine (no NVIDIA GPU driver)" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
# Within one node UCX moves VRAM with cuda_ipc; keep UCX's own choice unless the caller set one.
exec timeout 170 "$PY" -m bench.gpu_link_probe "$@"
