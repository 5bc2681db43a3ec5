#!/usr/bin/env bash
# Installs fusedmlp and what it needs into the current Python (idempotent).
# PyTorch is installed only when missing: `torch==2.13.0` (a GPU build on a GPU machine from
# PyPI; the local CPU wheel where one is provided). An existing torch 2.11-2.15 is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install -q "torch==2.13.0"
fi
"$PY" -m pip install -q -e ".[test,plot]"
