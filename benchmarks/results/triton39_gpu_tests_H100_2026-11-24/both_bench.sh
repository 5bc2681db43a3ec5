#!/usr/bin/env bash
# the same suites on Triton 3.6 (the image's) and 3.9 (carried), one H100, one after the other
set -u
bash scratch/t39.sh > /dev/null 2>&1
export PYTHONUNBUFFERED=1 TRITON_BACKENDS_IN_TREE=1
for tv in 36 39; do
  if [ $tv = 36 ]; then export PYTHONPATH=$PWD/src; else export PYTHONPATH=/tmp/t39:$PWD/src; fi
  mkdir -p $OUT/t$tv
  python3 -m fusedmlp.cli bench geglu --shapes 1024x8192,4096x8192,8192x8192 --modes fwd,fwd+bwd \
     --impls fused,fused_store,gemm,fused_graph,fused_store_graph --out $OUT/t$tv 2>/dev/null | tail -9
  python3 -m fusedmlp.cli bench mlp --shapes 2048x13x512x256x64x16,65536x13x512x256x64x16,65536x367x512x256x1 \
     --modes fwd,fwd+bwd --impls fused,fused_graph --out $OUT/t$tv 2>/dev/null | tail -8
  python3 -m fusedmlp.cli bench linear_act --shapes 16384x4096x14336 --modes fwd \
     --impls fused,gemm,fused_graph --out $OUT/t$tv 2>/dev/null | tail -4
done
find $OUT \( -name "*.csv" -o -name "*.png" \) -delete; ls -R $OUT
