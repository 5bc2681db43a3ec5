#!/usr/bin/env bash
# usage: bench.sh VERSION (36 = the image's Triton): small_shape_paths (host time of TMA launches) and epilogue_spills linear
set -u
v=$1; T0=$(date +%s)
if [ "$v" = 36 ]; then export PYTHONPATH=$PWD/src; else export PYTHONPATH=/tmp/t$v:$PWD/src TRITON_BACKENDS_IN_TREE=1; fi
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__, torch.cuda.get_device_name())"
timeout 300 python3 benchmarks/small_shape_paths.py --rounds 7 --json $OUT/small_shape_paths_t$v.json 2>&1 | grep -v Warning
TAG=_t$v timeout 200 python3 benchmarks/epilogue_spills.py linear 2>&1 | grep -v Warning
echo "bench t$v $(( $(date +%s) - T0 )) s"
