#!/usr/bin/env bash
# usage (repository root, these files in scratch/, Triton 3.9 carried as in results/triton39_gpu_tests_H100_2026-11-24/): bash scratch/run_bench.sh [mc_bench.py|mc_bench2.py|mc_bench3.py]
set -u
T0=$(date +%s)
if [ ! -d /tmp/t39/triton ]; then
  mkdir -p /tmp/t39 && cat /tmp/t39parts/t39s.part.00 tw2/t39s.part.01 > /tmp/t39s.tar.xz && python3 -c "import tarfile; tarfile.open('/tmp/t39s.tar.xz','r:xz').extractall('/tmp/t39')"
fi
echo "ready in $(( $(date +%s) - T0 )) s"
export PYTHONUNBUFFERED=1 TRITON_BACKENDS_IN_TREE=1 PYTHONPATH=/tmp/t39:$PWD/src
timeout 560 python3 scratch/${1:-mc_bench.py} 2>&1 | grep -v -i "warn\|leak\|nanobind\|skipped remainder" | tail -30
echo "total $(( $(date +%s) - T0 )) s"
