#!/usr/bin/env bash
# Installs fusedmlp and what it needs into the current Python (idempotent).
# PyTorch is installed only when missing, as `pip install torch==2.13.0` (whatever wheel pip's
# configuration resolves that to: a local CPU wheel on the CPU machines here). An installed
# torch is kept; the package then asks pip for torch>=2.11,<2.16 (pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install -q "torch==2.13.0"
fi
"$PY" -m pip install -q -e ".[test,plot]"
