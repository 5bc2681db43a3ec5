#!/usr/bin/env bash
set -u
bash scratch/t39.sh
export PYTHONPATH=/tmp/t39:$PWD/src TRITON_BACKENDS_IN_TREE=1 PYTHONUNBUFFERED=1
pids=()
for f in ${FILES}; do
  timeout 540 python3 -m pytest -q -rf -n ${WORKERS:-5} -p no:cacheprovider tests/$f.py > $OUT/$f.log 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait $p; done
for f in ${FILES}; do echo "== $f: $(grep -E '^FAILED|^ERROR' $OUT/$f.log | head -8)"; grep -E "passed|failed" $OUT/$f.log | tail -n 1; done
