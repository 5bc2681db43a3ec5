export PYTHONPATH=src
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv
python3 -c "import triton.backends.nvidia.compiler as c; print(c.CUDAOptions.allowed_dot_input_precisions)"
[ -n "$SKIP_GEMM" ] || timeout 120 python3 scratch/tf32x3_probe.py gemm > $OUT/gemm.log 2>&1; echo gemm rc $?
for m in ${MODES:-cublas tf32x3 bf16x6}; do
  /usr/bin/time -f "%e s" timeout 200 python3 scratch/tf32x3_probe.py mlp $m > $OUT/mlp_$m.log 2>&1; echo mlp $m rc $?; tail -1 $OUT/mlp_$m.log
done
python3 - <<'PY'
import json, glob, os
out = os.environ["OUT"]
for l in (open(f"{out}/gemm.log") if os.path.exists(f"{out}/gemm.log") else []):
    if l.startswith("gemm"):
        r = json.loads(l[5:]); print(r)
for f in sorted(glob.glob(f"{out}/mlp_*.log")):
    for l in open(f):
        if l.startswith("mlp "):
            r = json.loads(l[4:])
            print(f"{r['mode']:7s} {r['stack']:6s} {r['m']:6d} fwd {r['fused_fwd_us']:8.1f} / {r['eager_fwd_us']:8.1f} = {r['eager_over_fused_fwd']:.2f}x  "
                  f"fwdbwd {r['fused_fwdbwd_us']:8.1f} / {r['eager_fwdbwd_us']:8.1f} = {r['eager_over_fused_fwdbwd']:.2f}x  "
                  f"err y {r['fused_err_y']:.1e}/{r['eager_err_y']:.1e} dx {r['fused_err_dx']:.1e}/{r['eager_err_dx']:.1e} "
                  f"dw {r['fused_err_dw']:.1e}/{r['eager_err_dw']:.1e} db {r['fused_err_db']:.1e}/{r['eager_err_db']:.1e}")
PY
