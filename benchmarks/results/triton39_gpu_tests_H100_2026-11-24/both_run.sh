#!/usr/bin/env bash
set -u
bash scratch/t39.sh > /dev/null 2>&1
export PYTHONUNBUFFERED=1
run() {  # tag, pythonpath, file, workers
  if [ "$4" = 1 ]; then x=""; else x="-n $4"; fi
  PYTHONPATH=$2 timeout 480 python3 -m pytest -q -rf $x -p no:cacheprovider -W default tests/$3.py > $OUT/$1_$3.log 2>&1
}
S=$PWD/src
T=/tmp/t39:$PWD/src
export TRITON_BACKENDS_IN_TREE=1
run t36 $S test_launch 1 & run t36 $S test_mlp 3 & run t36 $S test_glu_gpu 1 & run t36 $S test_swiglu 3 &
run t39 $T test_launch 1 & run t39 $T test_linear_act 3 & run t39 $T test_lora 3 &
wait
for f in $OUT/*.log; do echo "== $(basename $f): $(grep -E '^FAILED|^ERROR' $f | head -5) $(grep -E ' passed| failed' $f | tail -n 1)"; echo "   fp-fusion warnings: $(grep -c FP_FUSION\\\|TRITON_DEFAULT_FP_FUSION $f)"; done
