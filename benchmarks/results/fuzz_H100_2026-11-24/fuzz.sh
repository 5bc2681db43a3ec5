#!/usr/bin/env bash
# GPU fuzz run: CASES per op, xdist workers; -v to see what finished, faulthandler for hangs
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
start=$(date +%s)
FUSEDMLP_FUZZ_CASES=${CASES:-24} timeout ${LIMIT:-480} python3 -m pytest -v -n 12 -p no:cacheprovider -p no:benchmark \
  -o faulthandler_timeout=${HANG:-100} -rf --durations=12 tests/test_fuzz.py ${SELECT:-} > $OUT/fuzz.log 2>&1
echo "rc $? in $(( $(date +%s) - start )) s"
grep -E "^FAILED|passed|failed" $OUT/fuzz.log | head -40
grep -E "^E |Timeout|most recent call first" $OUT/fuzz.log | head -40
grep -E "s (call|setup)" $OUT/fuzz.log | head -12
