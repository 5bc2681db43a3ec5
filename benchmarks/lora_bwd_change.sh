#!/usr/bin/env bash
# LoRA bench before / after the identity-activation and dx-addmm backward change (the tree of
# commit cba3210 as "before", made first with:
#   mkdir -p diag/before && git archive cba3210 src | tar -x -C diag/before
# and carried to the device), then the GPU tests the change touches. Writes under $OUT.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for wheel in .whl/*.whl; do
  module=$(basename "$wheel" | cut -d- -f1)
  python3 -c "import $module" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel"
done
for tree in before after; do
  if [ $tree = before ]; then PP=$PWD/diag/before/src; impls=fused,eager,gemm; else PP=$PWD/src; impls=fused,eager,compile,gemm; fi
  s=$SECONDS
  PYTHONPATH=$PP:/tmp/site python3 -m fusedmlp.cli bench lora --out $OUT/$tree --backward-thread caller --impls $impls 2> /tmp/$tree.stderr | tail -32
  grep -v "it/s" /tmp/$tree.stderr | tail -3
  rm -f $OUT/$tree/*.png
  echo "$tree bench: $((SECONDS - s)) s"
done
s=$SECONDS
PYTHONPATH=$PWD/src:/tmp/site timeout ${TT:-200} python3 -m pytest -q -rf -p no:cacheprovider tests/test_lora.py \
  -k "every_activation or dtypes_and_ranks or partial or chunks or dropout or at_scale or compile or strided or empty or module" \
  > $OUT/pytest_lora.log 2>&1 &
PYTHONPATH=$PWD/src:/tmp/site timeout ${TT:-200} python3 -m pytest -q -rf -p no:cacheprovider tests/test_linear_act.py \
  -k "every_activation or partial or chunks or at_scale or fused_dgrad or twice or deterministic or dtypes_and_shapes" \
  > $OUT/pytest_linear_act.log 2>&1 &
wait
tail -n 3 $OUT/pytest_lora.log $OUT/pytest_linear_act.log
echo "tests: $((SECONDS - s)) s"
