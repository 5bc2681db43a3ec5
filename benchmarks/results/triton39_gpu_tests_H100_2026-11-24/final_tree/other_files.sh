#!/usr/bin/env bash
set -u
T0=$(date +%s)
if [ ! -d /tmp/t39/triton ]; then
  mkdir -p /tmp/t39 && cat /tmp/t39parts/t39s.part.00 tw2/t39s.part.01 > /tmp/t39s.tar.xz && python3 -c "import tarfile; tarfile.open('/tmp/t39s.tar.xz','r:xz').extractall('/tmp/t39')"
fi
export PYTHONUNBUFFERED=1 TRITON_BACKENDS_IN_TREE=1
T=/tmp/t39:$PWD/src
PYTHONPATH=$T python3 -c "import triton; print('triton', triton.__version__, triton.__file__)"
run() {  # file, workers
  if [ "$2" = 1 ]; then x=""; else x="-n $2"; fi
  PYTHONPATH=$T timeout 540 python3 -m pytest -q -rf $x -p no:cacheprovider tests/$1.py > $OUT/t39_$1.log 2>&1
}
run test_fuzz 3 & run test_bench 2 & run test_activations 1 & run test_add_mul_act 1 & run test_autocast 1 &
run test_distributed 1 & run test_dlrm_data 1 & run test_embedding 1 & run test_interaction 1 & run test_patch 1 &
run test_tuning_cache 1 & run test_glu_gpu 1 &
wait
cd $OUT && for f in *.log; do echo "== $f: $(grep -E '^FAILED|^ERROR' $f | head -5) $(grep -E ' passed| failed|skipped' $f | tail -n 1)"; done
cat t39_*.log > t39_logs.txt && rm t39_*.log
echo "total $(( $(date +%s) - T0 )) s"
