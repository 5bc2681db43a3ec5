"""SwiGLU's store-mode dh: g = gy @ Wd on a ping-pong kernel's tile against cuBLAS g + the stream, in CUDA graphs.

    python benchmarks/glu_dh_pingpong_sweep.py [D,D... CONFIG ...]     (writes $OUT/glu_dh_pingpong_sweep.json)

For each shape (tokens, d, hidden): the two-step path (``g = gy @ Wd`` on cuBLAS, then the
stream kernel forming dh and z), the bare cuBLAS product alone, and the ping-pong kernels with
each config: ``n...`` the 128 x 64 kernel (``glu_bwd_dh_rotating_kernel`` since 2026-11-29), ``w...`` the
128 x 128 one with the epilogue in column halves (``glu_bwd_dh_wide_pingpong_kernel``), named
BLOCK_M x BLOCK_N, stages, GROUP_M; each checked against the two-step path first (max abs
difference of dh and z: g is rounded to bf16 on the two-step path only). Arguments: only the
shapes of the named d's, and only the named configs.
"""
import sys
import fusedmlp.ops._common as common
import fusedmlp.ops.glu as glu_ops
from fusedmlp.bench.harness import graph_us, max_abs_difference, print_sweep_row, swiglu_dh_cases, write_sweep

bases = {"n": dict(glu_ops.GLU_DH_ROTATING_CONFIG), "w": dict(glu_ops.GLU_DH_WIDE_PINGPONG_CONFIG)}
max_ks = {"n": 1 << 30, "w": 0}  # the narrow kernel's limit: which of the two runs
cfgs = {f"{kind}{m}x{n}s{s}g{g}": (kind, dict(BLOCK_M=m, BLOCK_N=n, STAGES=s, GROUP_M=g))
        for kind, m, n, s, g in [("n", 128, 64, 5, 1), ("n", 128, 64, 4, 8), ("w", 128, 128, 4, 8),
                                 ("w", 128, 128, 4, 16), ("w", 128, 128, 4, 1), ("w", 128, 128, 3, 8),
                                 ("w", 128, 128, 4, 4), ("w", 128, 128, 4, 6), ("w", 128, 128, 4, 12)]}
SHAPES = [(16384, 512, 1792), (16384, 1024, 2816), (16384, 2048, 5632), (16384, 4096, 14336)]
if len(sys.argv) > 1:
    SHAPES = [s for s in SHAPES if str(s[1]) in sys.argv[1].split(",")]
    cfgs = {k: v for k, v in cfgs.items() if k in sys.argv[2:]}


rows = []
for (tokens, d, hidden), (x, gy, w_up, w_gate, w_down, h) in swiglu_dh_cases(SHAPES):
    call = lambda: glu_ops.glu_backward_dh_impl(gy, x, w_up, w_gate, None, None, h, "silu", w_down, True)  # noqa: E731
    r = dict(shape=[tokens, d, hidden], cublas_g=graph_us(lambda: gy @ w_down))
    common.PINGPONG = False
    r["cublas_g_stream"] = graph_us(call)
    ref_dh, _, ref_z = call()
    common.PINGPONG = True
    for name, (kind, c) in cfgs.items():
        glu_ops.GLU_DH_ROTATING_CONFIG, glu_ops.GLU_DH_WIDE_PINGPONG_CONFIG = bases["n"], bases["w"]
        setattr(glu_ops, "GLU_DH_ROTATING_CONFIG" if kind == "n" else "GLU_DH_WIDE_PINGPONG_CONFIG",
                dict(bases[kind], **c))
        glu_ops.GLU_DH_PINGPONG_MAX_K = max_ks[kind]
        dh, _, z = call()
        r[name + "_maxdiff"] = max_abs_difference([(dh, ref_dh), (z, ref_z)])
        r[name] = graph_us(call)
    rows.append(r)
    print_sweep_row(r)
write_sweep("glu_dh_pingpong_sweep", rows)
