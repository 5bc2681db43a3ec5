#!/usr/bin/env bash
# One device-machine session (no network there): GPU tests, then the geglu benchmark.
# Runs from the repository root with the source tree on PYTHONPATH; pytest (and peers such as
# liger-kernel) come from wheels carried in .whl/ when the image lacks them. Results land in $OUT.
#   usage: bash scripts/gpu_session.sh [tests|bench|all] [extra bench args...]
set -uo pipefail
WHAT=${1:-all}; shift || true
read -r -a PYTEST_ARGS <<< "${PYTEST_EXTRA:-}"
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# carried wheels (pytest, liger-kernel, ...) for the packages the image lacks
if [ -d .whl ]; then
    for wheel in .whl/*.whl; do
        module=$(basename "$wheel" | cut -d- -f1)
        python3 -c "import $module" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel"
    done
    export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
python3 -m fusedmlp.cli info
rc=0
if [ "$WHAT" = tests ] || [ "$WHAT" = all ]; then
    timeout "${TEST_TIMEOUT:-400}" python3 -m pytest -v -rf --durations=15 -p no:cacheprovider tests "${PYTEST_ARGS[@]}" \
        > "$OUT/pytest.log" 2>&1
    rc=$?
    grep -E "FAILED|passed|failed|Error|slowest|^[0-9.]+s " "$OUT/pytest.log" | tail -40
fi
if [ "$WHAT" = bench ] || [ "$WHAT" = all ]; then
    python3 -m fusedmlp.cli bench geglu --out "$OUT" "$@" 2> "$OUT/bench.stderr" || rc=1
    grep -v "it/s" "$OUT/bench.stderr" | tail -5  # the progress bar stays in the file
fi
exit $rc
