#!/usr/bin/env bash
# One device-machine session (no network there): GPU tests, then benchmarks (SUITES, default geglu).
# Runs from the repository root with the source tree on PYTHONPATH; pytest (and peers such as
# liger-kernel) come from wheels carried in .whl/ when the image lacks them. Results land in $OUT.
#   usage: [SUITES="geglu swiglu"] [TEST_FILES="tests/test_glu.py ..."] [TEST_TIMEOUT=560] [TEST_WORKERS=N]
#          [PYTEST_EXTRA="..."] bash scripts/gpu_session.sh [tests|bench|all] [extra bench args...]
set -uo pipefail
WHAT=${1:-all}; shift || true
read -r -a PYTEST_ARGS <<< "${PYTEST_EXTRA:-}"
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# carried wheels (pytest, liger-kernel, quack-kernels, ...) for the packages the image lacks,
# into a folder named site-packages: QuACK treats code as an installed library's only under
# such a path (benchmarks/results/quack_H100_2026-11-24/README.md)
if [ -d .whl ]; then
    SITE=/tmp/peers/site-packages
    for wheel in .whl/*.whl; do
        module=$(basename "$wheel" | cut -d- -f1)
        python3 -c "import $module" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$wheel"
    done
    export PYTHONPATH=$PYTHONPATH:$SITE
    # what the CuTe DSL's .pth file adds in a real site-packages (PYTHONPATH folders skip .pth files)
    [ -d "$SITE/nvidia_cutlass_dsl/dsl_packages" ] && export PYTHONPATH=$PYTHONPATH:$SITE/nvidia_cutlass_dsl/dsl_packages
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
python3 -m fusedmlp.cli info
rc=0
if [ "$WHAT" = tests ] || [ "$WHAT" = all ]; then
    # the whole suite needs about 550 s on a 16-core H100 machine (2026-11-27: 1130 of 1136 tests
    # done at 540 s); a device call is cut at 600 s, and pytest needs a few seconds after the
    # limit's SIGINT to stop and print its summary
    limit=${TEST_TIMEOUT:-560}
    files=(${TEST_FILES:-tests/test_*.py})
    # SIGINT at the limit: pytest stops, then prints its counts and slowest tests (killed 15 s later)
    cut_off_at_limit() { timeout -s INT -k 15 "$limit" "$@"; }
    finished() {  # finished STATUS WHAT: say when the limit cut WHAT off; any failure fails the session
        # 124: stopped by the limit's SIGINT; 137: killed when it did not stop
        { [ "$1" = 124 ] || [ "$1" = 137 ]; } && echo "pytest: $2 cut off by the ${limit} s limit (TEST_TIMEOUT)"
        [ "$1" = 0 ] || rc=1
    }
    if python3 -c "import xdist" 2>/dev/null; then
        # one pytest process whose tests pytest-xdist spreads over the cores (compiling kernels is
        # CPU-bound; the GPU has room for every worker): with one process per file, the largest
        # files finish last by minutes (on a 16-core H100 machine, 2026-11-27, four of 19 files were
        # still running at 520 s while the others had finished)
        # -v: a line per test as it ends, so a failure is named even when the session never
        # reaches its summary (2026-11-27: every test had run, the workers' exit then hung in
        # torch.compile's worker-pool shutdown until the limit; tests/conftest.py now keeps
        # inductor's compiles in-process under xdist)
        cut_off_at_limit python3 -m pytest -n "${TEST_WORKERS:-$(nproc)}" -v -rfs --durations=10 \
            -p no:cacheprovider -p no:benchmark "${files[@]}" "${PYTEST_ARGS[@]}" > "$OUT/pytest.log" 2>&1
        finished $? "the run"
        logs=("$OUT/pytest.log")
    else
        # without pytest-xdist: one pytest process per test file, side by side
        pids=()
        for file in "${files[@]}"; do
            cut_off_at_limit python3 -m pytest -v -rf --durations=5 -p no:cacheprovider "$file" \
                "${PYTEST_ARGS[@]}" > "$OUT/pytest_$(basename "$file" .py).log" 2>&1 &
            pids+=($!)
        done
        for i in "${!pids[@]}"; do
            wait "${pids[$i]}"
            finished $? "${files[$i]}"
        done
        logs=("$OUT"/pytest_test_*.log)
    fi
    # failures from the summary, or from the per-test lines where no summary came
    grep -h -E "^(FAILED|ERROR) |\] (FAILED|ERROR) |Timeout" "${logs[@]}" | head -40
    for log in "${logs[@]}"; do  # pytest's closing counts line (after a cut-off, tracebacks follow it)
        closing=$(grep -E '^=+ .* in [0-9.]+s' "$log" | tail -n 1)
        echo "$(basename "$log"): ${closing:-$(tail -n 1 "$log")}"
    done
    if [ "${logs[0]}" != "$OUT/pytest.log" ]; then  # one file back, not one per test file (the device tool returns a few)
        for log in "${logs[@]}"; do echo "=== $log"; cat "$log"; done > "$OUT/pytest.log"
        rm -f "${logs[@]}"
    fi
fi
if [ "$WHAT" = bench ] || [ "$WHAT" = all ]; then
    for suite in ${SUITES:-geglu}; do
        python3 -m fusedmlp.cli bench "$suite" --out "$OUT" "$@" 2> "$OUT/bench_$suite.stderr" || rc=1
        grep -v "it/s" "$OUT/bench_$suite.stderr" | tail -5  # the progress bar stays in the file
    done
fi
exit $rc
