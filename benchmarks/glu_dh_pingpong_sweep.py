"""SwiGLU's store-mode dh: g = gy @ Wd on the ping-pong kernel's tile against cuBLAS g + the stream, in CUDA graphs.

    python benchmarks/glu_dh_pingpong_sweep.py [D,D... CONFIG ...]     (writes $OUT/glu_dh_pingpong_sweep.json)

For each shape (tokens, d, hidden): the two-step path (``g = gy @ Wd`` on cuBLAS, then the
stream kernel forming dh and z), the bare cuBLAS product alone, and the ping-pong kernel with
each config (BLOCK_M x BLOCK_N, stages, GROUP_M), checked against the two-step path first (max
abs difference of dh and z: g is rounded to bf16 on the two-step path only). Arguments: only
the shapes of the named d's, and only the named configs.
"""
import sys
import torch
import fusedmlp.ops._common as common
import fusedmlp.ops.glu as glu_ops
from fusedmlp.bench.harness import graph_us, print_sweep_row, write_sweep

base = dict(glu_ops.GLU_DH_PINGPONG_CONFIG)
cfgs = {f"{m}x{n}s{s}g{g}": dict(BLOCK_M=m, BLOCK_N=n, STAGES=s, GROUP_M=g)
        for m, n, s, g in [(128, 64, 4, 8), (128, 64, 3, 8), (64, 128, 4, 8), (64, 128, 3, 8), (128, 64, 5, 8),
                           (128, 64, 4, 1), (128, 64, 5, 1), (64, 128, 4, 1)]}
SHAPES = [(16384, 512, 1792), (16384, 1024, 2816), (16384, 2048, 5632), (16384, 4096, 14336)]
if len(sys.argv) > 1:
    SHAPES = [s for s in SHAPES if str(s[1]) in sys.argv[1].split(",")]
    cfgs = {k: v for k, v in cfgs.items() if k in sys.argv[2:]}


rows = []
torch.manual_seed(0)
for tokens, d, hidden in SHAPES:
    dt = torch.bfloat16
    x = torch.randn(tokens, d, device="cuda", dtype=dt)
    gy = torch.randn(tokens, d, device="cuda", dtype=dt)
    w_up, w_gate = (torch.randn(hidden, d, device="cuda", dtype=dt) / d**0.5 for _ in range(2))
    w_down = torch.randn(d, hidden, device="cuda", dtype=dt) / hidden**0.5
    h = torch.randn(tokens, 2 * hidden, device="cuda", dtype=dt)
    call = lambda: glu_ops.glu_backward_dh_impl(gy, x, w_up, w_gate, None, None, h, "silu", w_down, True)  # noqa: E731
    r = dict(shape=[tokens, d, hidden], cublas_g=graph_us(lambda: gy @ w_down))
    common.PINGPONG = False
    r["cublas_g_stream"] = graph_us(call)
    ref_dh, _, ref_z = call()
    common.PINGPONG = True
    for name, c in cfgs.items():
        glu_ops.GLU_DH_PINGPONG_CONFIG = dict(base, **c)
        dh, _, z = call()
        r[name + "_maxdiff"] = max((dh.float() - ref_dh.float()).abs().max().item(),
                                   (z.float() - ref_z.float()).abs().max().item())
        r[name] = graph_us(call)
    glu_ops.GLU_DH_PINGPONG_CONFIG = base
    rows.append(r)
    print_sweep_row(r)
write_sweep("glu_dh_pingpong_sweep", rows)
