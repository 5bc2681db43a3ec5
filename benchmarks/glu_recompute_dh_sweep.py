"""GEGLU's recompute-mode dh (h recomputed on the tile, g read, db partials): the ping-pong
kernel against the Triton TMA kernel, in CUDA graphs.

    python benchmarks/glu_recompute_dh_sweep.py [D,D... CONFIG ...]   (writes $OUT/glu_recompute_dh_sweep.json)

For each GEGLU shape (N, d; bias, bf16): the bare cuBLAS GEMM d -> 8d (the floor of the
recompute), the GLU forward storing h (the same traffic on the same main loop), the Triton TMA
dh kernel (the path before the ping-pong kernel, autotuned as in use), and the ping-pong
kernel with each config (BLOCK_N x stages x GROUP_M; "r240": 240 registers per consumer
thread and 24 per loader thread instead of 232 and 40; BLOCK_M is the db partials' 128), each
checked against the Triton kernel first (max abs difference of dh and db). Arguments: only
the shapes of the named d's, and only the named configs.
"""
import sys
import torch
import fusedmlp.ops._common as common
import fusedmlp.ops.glu as glu_ops
from fusedmlp.bench.harness import graph_us, max_abs_difference, print_sweep_row, write_sweep

base = dict(glu_ops.GLU_DH_RECOMPUTE_PINGPONG_CONFIG)
cfgs = {f"n{n}s{s}g{g}" + ("r240" if r else ""): dict(BLOCK_N=n, STAGES=s, GROUP_M=g,
                                                        **(dict(CONSUMER_REGS=240, LOADER_REGS=24) if r else {}))
        for n, s, g, r in [(64, 5, 8, 0), (64, 4, 8, 0), (64, 5, 1, 0), (64, 5, 16, 0), (64, 3, 8, 0),
                           (64, 4, 4, 0), (64, 4, 16, 0), (64, 4, 8, 1), (64, 5, 8, 1)]}
SHAPES = [(8192, 1024), (16384, 2048), (8192, 4096), (32768, 1024)]
if len(sys.argv) > 1:
    SHAPES = [s for s in SHAPES if str(s[1]) in sys.argv[1].split(",")]
    cfgs = {k: v for k, v in cfgs.items() if k in sys.argv[2:]}


rows = []
torch.manual_seed(0)
for n, d in SHAPES:
    dt = torch.bfloat16
    x = torch.randn(n, d, device="cuda", dtype=dt)
    w = torch.randn(8 * d, d, device="cuda", dtype=dt) / d**0.5
    b = torch.randn(8 * d, device="cuda", dtype=dt)
    g = torch.randn(n, 4 * d, device="cuda", dtype=dt)
    halves = (w[:4 * d], w[4 * d:], b[:4 * d], b[4 * d:])
    call = lambda: glu_ops.glu_backward_dh_impl(g, x, *halves, None, "gelu_tanh")  # noqa: E731
    r = dict(shape=[n, d], cublas_gemm=graph_us(lambda: x @ w.t()),
             # the GLU forward storing h: the same traffic (12d values per row) on the same main loop
             fwd_store_h=graph_us(lambda: glu_ops.glu_forward_impl(x, *halves, "gelu_tanh", True)))
    common.PINGPONG = False
    r["triton_tma"] = graph_us(call)
    ref_dh, ref_db, _ = call()
    common.PINGPONG = True
    for name, c in cfgs.items():
        glu_ops.GLU_DH_RECOMPUTE_PINGPONG_CONFIG = dict(base, **c)
        dh, db, _ = call()
        r[name + "_maxdiff"] = max_abs_difference([(dh, ref_dh), (db, ref_db)])
        r[name] = graph_us(call)
    glu_ops.GLU_DH_RECOMPUTE_PINGPONG_CONFIG = base
    rows.append(r)
    print_sweep_row(r)
write_sweep("glu_recompute_dh_sweep", rows)
