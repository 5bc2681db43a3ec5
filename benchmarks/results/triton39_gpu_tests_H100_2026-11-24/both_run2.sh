#!/usr/bin/env bash
set -u
bash scratch/t39.sh > /dev/null 2>&1
export PYTHONUNBUFFERED=1 TRITON_BACKENDS_IN_TREE=1
run() {  # tag, pythonpath, file, workers
  if [ "$4" = 1 ]; then x=""; else x="-n $4"; fi
  PYTHONPATH=$2 timeout 430 python3 -m pytest -q -rf $x -p no:cacheprovider tests/$3.py > $OUT/$1_$3.log 2>&1
}
S=$PWD/src; T=/tmp/t39:$PWD/src
run t36 $S test_launch 1 & run t39 $T test_launch 1 & run t39 $T test_glu_gpu 1 &
run t39 $T test_glu 4 & run t39 $T test_linear_act 4 & run t39 $T test_lora 3 & run t39 $T test_mlp 3 & run t39 $T test_swiglu 2 &
wait
for f in $OUT/*.log; do echo "== $(basename $f): $(grep -E '^FAILED|^ERROR' $f | head -5) $(grep -E ' passed| failed' $f | tail -n 1)"; done
mkdir -p $OUT/b39
PYTHONPATH=$T python3 -m fusedmlp.cli bench mlp --shapes 2048x13x512x256x64x16,65536x13x512x256x64x16,65536x367x512x256x1 \
     --modes fwd,fwd+bwd --impls fused,fused_graph --out $OUT/b39 2>/dev/null | tail -8
find $OUT \( -name "*.csv" -o -name "*.png" \) -delete
cat $OUT/t36_test_launch.log $OUT/t39_test_launch.log $OUT/t39_test_glu_gpu.log > $OUT/launch_logs.txt; rm $OUT/t36_test_launch.log $OUT/t39_test_launch.log $OUT/t39_test_glu_gpu.log
ls -R $OUT
