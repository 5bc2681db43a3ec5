#!/usr/bin/env bash
# SwiGLU at the LLM shape (16384 tokens, 4096 -> 14336, bf16), the tree before the store-mode
# backward formed [dW_up; dW_gate] and dx over all rows, and the tree after, alternating, one
# process each, two rounds; JSON under $OUT/{before,after}_{1,2}. "before" is commit 458700b,
# made first with:
#   mkdir -p diag/before && git archive 458700b src | tar -x -C diag/before
# and carried to the device.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for round in 1 2; do
  for tree in before after; do
    src=src; [ $tree = before ] && src=diag/before/src
    PYTHONPATH=$PWD/$src python -m fusedmlp.cli bench swiglu --shapes 16384x4096x14336 --dtype bf16 \
      --impls fused,compile,gemm --modes bwd,fwd+bwd --backward-thread caller \
      --out "$OUT/${tree}_$round" 2> "$OUT/${tree}_$round.stderr" | tail -12
  done
done
