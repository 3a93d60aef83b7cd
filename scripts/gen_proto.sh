#!/usr/bin/env bash
# Regenerates pd_serve/proto/pd_serve_pb2.py, _pb2.pyi and _pb2_grpc.py from pd_serve.proto.
# Run from anywhere; uses the project's virtualenv (grpcio-tools is in the dev extra).
# The include root is the repository root, so the generated imports are absolute
# (`from pd_serve.proto import pd_serve_pb2`) and need no fixing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -m grpc_tools.protoc -I . \
  --python_out=. --pyi_out=. --grpc_python_out=. \
  pd_serve/proto/pd_serve.proto
echo "generated: $(ls pd_serve/proto/pd_serve_pb2*.py* | tr '\n' ' ')"
