#!/usr/bin/env bash
# usage: tests.sh TAG LIMIT_S SPEC...   SPEC = version:file:workers (version 36 = the image's Triton)
set -u
T0=$(date +%s); TAG=$1; LIMIT=$2; shift 2
export PYTHONUNBUFFERED=1
mkdir -p /tmp/logs
run() {
  IFS=: read v f w <<< "$1"
  if [ "$v" = 36 ]; then pp=$PWD/src; else pp=/tmp/t$v:$PWD/src; fi
  if [ "$w" = 1 ]; then x=""; else x="-n $w"; fi
  left=$(( LIMIT - $(date +%s) + T0 ))
  TRITON_BACKENDS_IN_TREE=$([ "$v" = 36 ] && echo 0 || echo 1) PYTHONPATH=$pp timeout $left \
    python3 -m pytest -q -rfE $x -p no:cacheprovider tests/$f.py > /tmp/logs/t${v}_$f.log 2>&1
  echo "exit $?" >> /tmp/logs/t${v}_$f.log
}
for spec in "$@"; do run $spec & done
wait
cd /tmp/logs && for f in *.log; do echo "== $f: $(grep -E '^FAILED|^ERROR' $f | head -5 | cut -c1-200) $(grep -E ' passed| failed|skipped|error' $f | tail -n 1) $(tail -n 1 $f)"; done
cat /tmp/logs/*.log > $OUT/${TAG}_logs.txt; rm -f /tmp/logs/*.log
echo "total $(( $(date +%s) - T0 )) s"
