#!/usr/bin/env bash
# fp32 reciprocals as rcp.approx in the forward activations: kernel time in CUDA graphs
# (benchmarks/fwd_graph_floor.py), the tree before (commit 458700b, made first with
#   mkdir -p diag/before && git archive 458700b src | tar -x -C diag/before
# and carried to the device) and after, alternating, twice; then the linear_act forward bench.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for round in 1 2; do
  for tree in before after; do
    src=src; [ $tree = before ] && src=diag/before/src
    OUT=$OUT PYTHONPATH=$PWD/$src python benchmarks/fwd_graph_floor.py ${tree}_$round 2>&1 | grep -v -i warn
  done
done
PYTHONPATH=$PWD/src python -m fusedmlp.cli bench linear_act --dtype bf16 --modes fwd --impls fused,fused_preact,eager,compile,gemm,fused_graph \
  --out $OUT/la 2> $OUT/la.stderr | tail -8
