#!/usr/bin/env bash
# Multi-GPU session (a machine with 2 GPUs): scaling figures (benchmarks/scaling.py), then the
# NCCL tests of tests/test_distributed.py. Results and logs land in $OUT.
#   usage: [SCALING="dlrm swiglu"] [DLRM_IMPLS=fused,fused_graph] [DLRM_EXTRA=--timeline]
#          [TEST_FILES=tests/test_distributed.py, "none" to skip the tests] bash scripts/gpu_scaling.sh
set -uo pipefail
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
if [ -d .whl ]; then  # carried wheels (pytest) for what the image lacks
    for wheel in .whl/*.whl; do
        module=$(basename "$wheel" | cut -d- -f1)
        python3 -c "import $module" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel"
    done
    export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
RUN="python3 -m torch.distributed.run --standalone"
SCALING=${SCALING:-dlrm swiglu}
DLRM_IMPLS=${DLRM_IMPLS:-fused,fused_graph}
# the single-GPU runs side by side, one per GPU
case " $SCALING " in *" dlrm "*)
    CUDA_VISIBLE_DEVICES=0 timeout 220 $RUN --nproc-per-node 1 benchmarks/scaling.py dlrm --impls "$DLRM_IMPLS" \
        ${DLRM_EXTRA:-} --out "$OUT" > "$OUT/scaling_dlrm_1gpu.log" 2>&1 & ;; esac
case " $SCALING " in *" swiglu "*)
    CUDA_VISIBLE_DEVICES=1 timeout 170 $RUN --nproc-per-node 1 benchmarks/scaling.py swiglu --layers 2 \
        --out "$OUT" > "$OUT/scaling_swiglu_1gpu.log" 2>&1 & ;; esac
wait
case " $SCALING " in *" dlrm "*)
    timeout 190 $RUN --nproc-per-node 2 benchmarks/scaling.py dlrm --impls "$DLRM_IMPLS" ${DLRM_EXTRA:-} --out "$OUT" \
        > "$OUT/scaling_dlrm_2gpu.log" 2>&1 ;; esac
case " $SCALING " in *" swiglu "*)
    timeout 80 $RUN --nproc-per-node 2 benchmarks/scaling.py swiglu --layers 2 --out "$OUT" \
        > "$OUT/scaling_swiglu_2gpu.log" 2>&1 ;; esac
[ "${TEST_FILES:-}" = none ] || timeout "${TEST_TIMEOUT:-150}" python3 -m pytest -v -rf -p no:cacheprovider -m gpu ${TEST_FILES:-tests/test_distributed.py} \
    > "$OUT/pytest_distributed.log" 2>&1
for log in "$OUT"/scaling_*.log; do echo "== $log"; grep -E "M/s|Error|error" "$log" | tail -6; done
[ "${TEST_FILES:-}" = none ] || grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/pytest_distributed.log" | tail -12
