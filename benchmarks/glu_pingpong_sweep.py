"""GLU forward: ping-pong configs against the Triton TMA kernel and cuBLAS, in CUDA graphs.

    python benchmarks/glu_pingpong_sweep.py [FIRST_SHAPE CONFIG ...]     (writes $OUT/glu_pingpong_sweep.json)

Each config is checked against the Triton kernel's y and h (max abs difference) before it is
timed, in recompute (y only) and store (y and h) mode; ``library``: the configs the library
picks (cooperative for y alone from K = GLU_COOPERATIVE_MIN_K). Arguments: skip the shapes before
index FIRST_SHAPE and time only the named configs (names without ``g``: the library's GROUP_M;
``coop``: the cooperative form, both consumers on one tile of twice BLOCK_M rows).
"""
import os, sys
import torch
import fusedmlp.ops._common as common
import fusedmlp.ops.glu as glu_ops
from fusedmlp.bench.harness import graph_us, max_abs_difference, print_sweep_row, write_sweep
from fusedmlp.ops.glu import glu_forward_impl
base, coop_base = dict(glu_ops.GLU_PINGPONG_CONFIG), dict(glu_ops.GLU_COOPERATIVE_CONFIG)
# BLOCK_N is per weight: the consumers' MMA is BLOCK_M x 2 * BLOCK_N
cfgs = {"64x128s4": dict(BLOCK_M=64, BLOCK_N=128, STAGES=4), "64x128s3": dict(BLOCK_M=64, BLOCK_N=128, STAGES=3),
        "128x64s4": dict(BLOCK_M=128, BLOCK_N=64, STAGES=4), "128x64s5": dict(BLOCK_M=128, BLOCK_N=64, STAGES=5),
        **{f"128x64s5g{g}": dict(BLOCK_M=128, BLOCK_N=64, STAGES=5, GROUP_M=g) for g in (4, 8, 16, 32)},
        # cooperative: both consumers on one 256-row tile, 128 rows each
        **{f"coop128x64s{s}g{g}": dict(BLOCK_M=128, BLOCK_N=64, STAGES=s, GROUP_M=g, COOPERATIVE=True)
           for s in (3, 4) for g in (4, 8, 16)}}


def t(fn):
    return graph_us(fn, int(os.environ.get("REP_MS", 300)))


rows = []
torch.manual_seed(0)
SHAPES = [(16384, 512, 1792, "silu"), (8192, 1024, 4096, "gelu_tanh"), (32768, 1024, 4096, "gelu_tanh"),
          (16384, 2048, 8192, "gelu_tanh"), (8192, 4096, 16384, "gelu_tanh")]
if len(sys.argv) > 1:
    SHAPES = SHAPES[int(sys.argv[1]):]
    cfgs = {k: v for k, v in cfgs.items() if k in sys.argv[2:]}
for M, K, OUT, act in SHAPES:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2 * OUT, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
    b = torch.randn(2 * OUT, device="cuda", dtype=torch.bfloat16)
    w1, w2, b1, b2 = w[:OUT], w[OUT:], b[:OUT], b[OUT:]
    r = dict(shape=[M, K, OUT], act=act, cublas=t(lambda: x @ w.T))
    common.PINGPONG = False
    r["triton"] = t(lambda: glu_forward_impl(x, w1, w2, b1, b2, act, False))
    r["triton_store"] = t(lambda: glu_forward_impl(x, w1, w2, b1, b2, act, True))
    ref = glu_forward_impl(x, w1, w2, b1, b2, act, True)
    common.PINGPONG = True
    r["library"] = t(lambda: glu_forward_impl(x, w1, w2, b1, b2, act, False))
    r["library_store"] = t(lambda: glu_forward_impl(x, w1, w2, b1, b2, act, True))
    for name, c in cfgs.items():
        # the named config whichever form the library would pick
        glu_ops.GLU_PINGPONG_CONFIG = glu_ops.GLU_COOPERATIVE_CONFIG = dict(base, **c)
        y, h = glu_forward_impl(x, w1, w2, b1, b2, act, True)
        r[name + "_maxdiff"] = max_abs_difference([(y, ref[0]), (h, ref[1])])
        r[name] = t(lambda: glu_forward_impl(x, w1, w2, b1, b2, act, False))
        r[name + "_store"] = t(lambda: glu_forward_impl(x, w1, w2, b1, b2, act, True))
    glu_ops.GLU_PINGPONG_CONFIG, glu_ops.GLU_COOPERATIVE_CONFIG = base, coop_base
    rows.append(r)
    print_sweep_row(r)
write_sweep("glu_pingpong_sweep", rows)
