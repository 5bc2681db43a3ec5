#!/usr/bin/env bash
# the tests part of the first call (its cluster-multicast timings: results/cluster_multicast_H100_2026-11-24/)
set -u
T0=$(date +%s)
export PYTHONUNBUFFERED=1 TRITON_BACKENDS_IN_TREE=1
T=/tmp/t39:$PWD/src; S=$PWD/src
run() {  # tag, pythonpath, file, workers, timeout
  if [ "$4" = 1 ]; then x=""; else x="-n $4"; fi
  PYTHONPATH=$2 timeout $5 python3 -m pytest -q -rf $x -p no:cacheprovider tests/$3.py > $OUT/$1_$3.log 2>&1
}
run t36 $S test_launch 1 250 & run t39 $T test_launch 1 250 & run t39 $T test_dlrm_model 6 $(( 570 - $(date +%s) + T0 )) &
wait
for f in $OUT/*.log; do echo "== $(basename $f): $(grep -E '^FAILED|^ERROR' $f | head -5) $(grep -E ' passed| failed' $f | tail -n 1)"; done
echo "total $(( $(date +%s) - T0 )) s"
