#!/usr/bin/env bash
# usage: bash scratch/ncu_sections.sh from the repository root, mc_linear.py and mc_ncu.py in scratch/, Triton 3.9 carried (see run_bench.sh)
set -u
if [ ! -d /tmp/t39/triton ]; then
  mkdir -p /tmp/t39 && cat /tmp/t39parts/t39s.part.00 tw2/t39s.part.01 > /tmp/t39s.tar.xz && python3 -c "import tarfile; tarfile.open('/tmp/t39s.tar.xz','r:xz').extractall('/tmp/t39')"
fi
export PYTHONUNBUFFERED=1 TRITON_BACKENDS_IN_TREE=1 PYTHONPATH=/tmp/t39:$PWD/src
python3 scratch/mc_ncu.py > /dev/null 2>&1  # compile outside the profiler
timeout 500 ncu --clock-control none -k regex:"linear_act_fwd_pingpong|mc_linear_fwd" --launch-count 3 \
  --section WarpStateStats --section SchedulerStats --section SpeedOfLight python3 scratch/mc_ncu.py > $OUT/mc_ncu_stalls.txt 2>&1
grep -v "^==PROF==\|^ *-----" $OUT/mc_ncu_stalls.txt | sed 's/  */ /g' | grep -v "^ *$" | head -120
