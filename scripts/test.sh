#!/usr/bin/env bash
# Installs everything the tests need, then runs them. Without a CUDA GPU the kernels run
# through the Triton interpreter (tests/conftest.py sets TRITON_INTERPRET=1); with one, the
# GPU-marked tests (bf16 at scale, > 2^31-element tensors) run too. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec "${PYTHON:-python3}" -m pytest -q "$@"
