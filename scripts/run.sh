#!/usr/bin/env bash
# The main job: installs fusedmlp, then runs `fusedmlp ARGS` (default: `dlrm train`: a DLRM
# trained on the synthetic Criteo-format sample shipped with fusedmlp, validated by AUC; the
# fused kernels on a CUDA GPU, eager PyTorch on a CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
if [ "$#" -eq 0 ]; then set -- dlrm train; fi
exec "${PYTHON:-python3}" -m fusedmlp "$@"
