#!/usr/bin/env bash
# The main job: installs fusedmlp, then runs `fusedmlp ARGS` (default: `bench geglu`).
# On a CUDA GPU this benchmarks; without one it runs a small interpreted accuracy check.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
if [ "$#" -eq 0 ]; then set -- bench geglu; fi
exec "${PYTHON:-python3}" -m fusedmlp "$@"
