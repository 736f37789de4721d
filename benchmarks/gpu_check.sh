#!/usr/bin/env bash
# Checkpoint and resume a CUDA model on this machine's GPU; report device<->host GB/s.
# For a GPU machine only (never CI). Usage: benchmarks/gpu_check.sh [--size-gb 1.5] [--json FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_check: $PY has no torch that sees a CUDA device; run it on a GPU machine" >&2
    echo "  (or point PYTHON at an interpreter whose torch is a CUDA build)" >&2
    exit 2
fi
# Use this checkout even where the package is not installed (its dependencies must be).
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader 2>/dev/null || true
exec "$PY" benchmarks/gpu_check.py "$@"
